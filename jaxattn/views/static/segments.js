/* Statistics along the text (segments.py's document): for each statistic (sink, prev,
 * local, entropy) a heat map with one row per layer x head and one column per segment
 * of the text, beside a column of whole-text values; clicking a row draws that head's
 * curves along the text. Used by the stats-first page (segments_page.py, its own
 * mount) and by the main page's stats view of a long example (stats.js).
 * A head whose map was not captured has whole-text values from the captured
 * statistics (its source is named) and grey segments.
 * DOM hooks: canvas.sg-map[data-stat][data-rows][data-cols] (column 0: whole text,
 * columns 2.. segments), #sg-readout[data-stat][data-layer][data-head][data-segment][data-v]
 * (data-segment -1: whole text), #sg-curves[data-layer][data-head] svg polyline[data-stat],
 * .jx-cbar#sg-cbar-STAT[data-min][data-max]. */
"use strict";
(function () {
  const JX = (window.JaxattnViews = window.JaxattnViews || {});
  const TITLES = {
    sink: "sink: weight on the first token",
    prev: "previous token",
    local: "local: keys within ±{w} tokens",
    entropy: "entropy (nats)",
  };
  const NS = "http://www.w3.org/2000/svg";
  const fmt = (v) => (v === null || v === undefined ? "n/a" : (+v).toFixed(4));
  /** Draw the document `doc` of an example with `tokens` (display strings) into `el`. */
  JX.drawSegments = function (el, doc, tokens, kind) {
    el.innerHTML = "";
    const k = doc.kinds[kind];
    if (!k) { el.append(JX.el("div", { class: "info" }, `No statistics for ${kind} weights in this file.`)); return; }
    const L = doc.layers.length, H = doc.heads.length, S = doc.bounds.length, R = L * H;
    const cw = Math.max(2, Math.min(14, Math.floor(900 / (S + 2)))), rh = Math.max(3, Math.min(14, Math.floor(480 / R)));
    const lab = 56, mapped = k.source.flat().filter((s) => s === "maps").length;
    const local = doc.causal ? `the ${doc.local} tokens before and the token itself` : `within ±${doc.local} tokens`;
    el.append(JX.el("div", { class: "info", id: "sg-info" },
      `${doc.T} tokens in ${S} segments of ${doc.segment}; one row per layer × head (${mapped} of ${R} from their maps). ` +
      `Each cell: the mean over the segment's query rows (row 0 left out) of the weight on the first token (sink), ` +
      `on the previous token, on the keys ${local} (the first token left out: it is the sink's), and the row entropy. ` +
      "The first column is the whole text. Heads without a map: sink, previous and entropy from the captured per-row statistics " +
      "(no local share: it needs the map), else whole-text values from the captured statistics and no segments. " +
      "Hover a cell for its numbers and text; click a row for the head's curves." + (doc.causal ? ` ${JX.CAUSAL_NOTE || ""}` : "")));
    const readout = JX.el("div", { class: "info", id: "sg-readout" }, "Hover a cell.");
    const curves = JX.el("div", { id: "sg-curves" });
    const box = JX.el("div", { class: "sg-box", style: "display:flex;flex-wrap:wrap;gap:18px" });
    const row = (r) => [Math.floor(r / H), r % H];
    for (const stat of doc.stats) {
      const seg = k.segments[stat], whole = k.whole[stat];
      let lo = 0, hi = 0;
      const see = (v) => { if (v !== null) { lo = Math.min(lo, v); hi = Math.max(hi, v); } };
      whole.forEach((r) => r.forEach(see));
      seg.forEach((r) => r.forEach((s) => s && s.forEach(see)));
      if (hi <= lo) hi = lo + 1;
      const W = lab + (S + 2) * cw, Hh = R * rh;
      const c = JX.el("canvas", { class: "sg-map", width: W, height: Hh, "data-stat": stat, "data-rows": R, "data-cols": S + 2 });
      const g = c.getContext("2d");
      g.fillStyle = "#fff"; g.fillRect(0, 0, W, Hh);
      const paint = (v, x, y) => {
        g.fillStyle = v === null ? "#e6e6e6" : `rgba(31,119,180,${((v - lo) / (hi - lo)).toFixed(3)})`;
        g.fillRect(x, y, cw, rh);
      };
      for (let r = 0; r < R; r++) {
        const [li, hi_] = row(r), y = r * rh, s = seg[li][hi_];
        paint(whole[li][hi_], lab, y);
        for (let q = 0; q < S; q++) paint(s ? s[q] : null, lab + (q + 2) * cw, y);
      }
      g.fillStyle = "#555"; g.font = `${Math.min(11, Math.max(8, rh))}px sans-serif`; g.textBaseline = "middle";
      const every = Math.max(1, Math.ceil(11 / rh));
      for (let r = 0; r < R; r += every) {
        const [li, hi_] = row(r);
        g.fillText(`L${doc.layers[li]} H${doc.heads[hi_]}`, 2, r * rh + rh / 2, lab - 4);
      }
      c.addEventListener("mousemove", (e) => {
        const b = c.getBoundingClientRect(), x = (e.clientX - b.left) * (c.width / b.width) - lab;
        const r = Math.floor(((e.clientY - b.top) * (c.height / b.height)) / rh), q = Math.floor(x / cw) - 2;
        if (r < 0 || r >= R || x < 0 || q === -1 || q >= S) return;
        const [li, hi_] = row(r), s = seg[li][hi_], v = q < 0 ? whole[li][hi_] : s ? s[q] : null;
        const [a, z] = q < 0 ? [0, doc.T] : doc.bounds[q];
        const src = k.source[li][hi_] || "not captured";
        Object.assign(readout.dataset, { stat, layer: li, head: hi_, segment: q < 0 ? -1 : q, v: v === null ? "" : v });
        const text = tokens.slice(a, Math.min(z, a + 24)).join(" ") + (z - a > 24 ? " …" : "");
        readout.textContent = `layer ${doc.layers[li]}, head ${doc.heads[hi_]}, ` +
          (q < 0 ? "whole text" : `segment ${q}: tokens ${a}–${z - 1}`) + `: ${stat} ${fmt(v)} (from ${src}). ${text}`;
      });
      c.addEventListener("click", (e) => {
        const b = c.getBoundingClientRect(), r = Math.floor(((e.clientY - b.top) * (c.height / b.height)) / rh);
        if (r >= 0 && r < R) drawCurves(...row(r));
      });
      box.append(JX.el("figure", { class: "sv-fig", "data-stat": stat, style: "margin:0" },
        JX.el("figcaption", {}, (stat === "local" && doc.causal ? "local: the {w} tokens before and itself" : TITLES[stat]).replace("{w}", String(doc.local))), c,
        JX.el("div", {}, JX.colorBar(`sg-cbar-${stat}`, ["#fff", "rgb(31,119,180)"], lo, hi, null, 96))));
    }
    /** One small line chart per statistic of one head along the text. */
    function drawCurves(li, hi_) {
      curves.innerHTML = "";
      Object.assign(curves.dataset, { layer: li, head: hi_ });
      curves.append(JX.el("h3", {}, `Layer ${doc.layers[li]}, head ${doc.heads[hi_]} along the text`));
      for (const stat of doc.stats) {
        const s = k.segments[stat][li][hi_], cwid = 300, ch = 90, pad = 26;
        const svg = document.createElementNS(NS, "svg");
        svg.setAttribute("width", cwid + 2 * pad); svg.setAttribute("height", ch + 2 * pad);
        if (!s) {
          svg.innerHTML = `<text x="${pad}" y="${pad + 20}" class="ax">${JX.esc(stat)}: whole text ${fmt(k.whole[stat][li][hi_])} (no map: ${stat === "local" ? "no local share" : "no segments"})</text>`;
          curves.append(svg); continue;
        }
        const vals = s.filter((v) => v !== null), top = Math.max(stat === "entropy" ? 0 : 1, ...vals);
        const pts = s.map((v, q) => (v === null ? null : `${(pad + ((q + 0.5) / S) * cwid).toFixed(1)},${(pad + ch - (v / top) * ch).toFixed(1)}`))
          .filter((p) => p).join(" ");
        svg.innerHTML = `<text x="${pad}" y="14" class="ax">${JX.esc(stat)} (0–${top.toPrecision(3)}), tokens 0–${doc.T - 1}</text>` +
          `<rect x="${pad}" y="${pad}" width="${cwid}" height="${ch}" fill="none" stroke="#ccc"/>` +
          `<polyline data-stat="${stat}" points="${pts}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>`;
        curves.append(svg);
      }
    }
    el.append(box, readout, curves);
    drawCurves(0, 0);
  };

  /** The stats-first page: {examples: [{label, tokens, doc}]} with an example and a kind selector. */
  JX.mountSegments = function (root, data) {
    root.innerHTML = ""; root.classList.add("jx");
    // where the page opens (segments_page.py's "start"; the web viewer's documents have none)
    const state = { example: (data.start || { example: 0 }).example, kind: "attention" };
    const body = JX.el("section", { id: "view-segments" });
    const kinds = () => Object.keys(data.examples[state.example].doc.kinds);
    const kindSel = JX.select("kind", Object.entries(JX.KIND_TITLES || { attention: "attention", norm: "norm" }), "attention", (v) => { state.kind = v; draw(); });
    const exSel = JX.select("example", data.examples.map((e, i) => [i, e.label]), state.example, (v) => { state.example = +v; draw(); });
    if (data.examples.length < 2) exSel.disabled = true;
    root.append(JX.el("div", { class: "jx-bar" }, JX.el("label", {}, "Example ", exSel), JX.el("label", {}, "Weights ", kindSel)), body);
    function draw() {
      const have = kinds();
      kindSel.querySelectorAll("option").forEach((o) => { o.disabled = !have.includes(o.value); });
      if (!have.includes(state.kind)) { state.kind = have[0]; kindSel.value = state.kind; }
      const ex = data.examples[state.example];
      JX.drawSegments(body, ex.doc, ex.tokens, state.kind);
      root.dataset.example = String(state.example);
      root.dataset.state = "ready";
    }
    draw();
  };
})();
