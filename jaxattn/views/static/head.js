/* Head view (after Vig's BertViz): tokens on the left attend to tokens on the
 * right; one line per (query i, key j, head), stroke-opacity = weight / number
 * of active heads (BertViz's scaling: with every head on, overlapping lines do
 * not saturate). Hovering (or clicking, to pin) a token draws only its lines
 * and, beside the tokens on the other side, one box per active head in its
 * colour, each 1/active of the strip wide, fill-opacity = weight (BertViz's
 * attention boxes). Stays responsive at 512 tokens: at most MAX_LINES lines
 * (the strongest, by a histogram of log2 weights, 32 bins an octave), every
 * line of a hovered or pinned token (up to TOKEN_MAX_LINES), and a line's or
 * box's tooltip (<title>: head, tokens, weight) is made only when the pointer
 * reaches it.
 * A decoder's continuation (ex.generated_start: payload.py) shows its generated tokens
 * in their own style below a dashed line, and a "Tokens" filter (generated → prompt, ...)
 * as a pair's "Sentences" filter.
 * A decoder's example (ex.causal) has no line for j > i (its weights are 0 there, and
 * the loops stop at the diagonal) and the legend says so. A text over WINDOW tokens
 * is shown WINDOW tokens at a time, queries and keys alike: #hv-from picks the first,
 * #hv-find finds a token (Enter: the next match), moves the window to it and pins it.
 * DOM hooks: line[data-i][data-j][data-head][data-w], svg#hv-svg[data-min]
 * [data-drawn][data-candidates][data-active], rect.hv-box[data-side][data-idx]
 * [data-i][data-j][data-head][data-w], .chip[data-head][data-on], #hv-all,
 * #hv-none, #hv-legend[data-causal], text.tok[data-side][data-idx] (.gen: a generated
 * token), path.hv-gen[data-side][data-at] (where the generated tokens start), #hv-from, #hv-find,
 * #hv-window[data-lo][data-hi].
 * A LONG example (ex.long: embedded as bands, long_maps.is_long) shows
 * the window of RADIUS tokens either side of a centre (JX.around), queries and keys
 * alike, with every line between them: #hv-at sets the centre, clicking a token
 * centres the window on it and pins it, #hv-find (Enter: the next match) centres it on
 * the next token containing the text and pins that. Hovering a token of the window
 * draws its lines there; #hv-first[data-query][data-weights] gives a query's weight on
 * the first token per active head when the window does not hold it. */
"use strict";
(function () {
  const JX = window.JaxattnViews;
  const WINDOW = 512, RADIUS = 64, MAX_LINES = 5000, TOKEN_MAX_LINES = 50000, RH = 18, COLW = 130, BOXW = 36, GAP = 220, PAD = 6;
  // The cut-off's histogram: bins of log2(weight) from 2^-24 to 1, OCTAVE to an octave.
  const OCTAVE = 32, BINS = 24 * OCTAVE + 1;
  const bin = (w) => Math.max(0, Math.min(BINS - 1, Math.floor((Math.log2(w) + 24) * OCTAVE)));
  // x of the left strip, the lines' ends, the right strip, the right tokens
  const XL = COLW, X1 = COLW + BOXW, X2 = X1 + GAP, XR = X2, XT = X2 + BOXW + 4;
  const NORMS = {
    attention: "attention α",
    norm: "‖αf(x)‖ with each query's row divided by its sum (rows sum to 1, as α's do)",
  };
  JX.views.head = function (ctx) {
    const st = { layer: 0, on: null, filter: "all", min: 0, pinned: null, hover: null, lo: 0, found: -1, center: 0 };
    const el = JX.el("div", { class: "hv" });
    const controls = JX.el("div", { class: "jx-controls" });
    const chips = JX.el("div", { id: "hv-heads", class: "chips" });
    const legend = JX.el("div", { id: "hv-legend", class: "hv-legend" });
    const info = JX.el("div", { id: "hv-info", class: "info" });
    const sink = JX.el("div", { id: "hv-first", class: "info", hidden: true });
    const scroll = JX.el("div", { class: "hv-scroll" });
    const NS = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(NS, "svg");
    svg.id = "hv-svg";
    const [gLines, gBoxes, gToks] = [0, 1, 2].map(() => document.createElementNS(NS, "g"));
    gBoxes.setAttribute("class", "hv-boxes");
    svg.append(gLines, gBoxes, gToks);
    scroll.append(svg);
    el.append(controls, chips, legend, info, sink, scroll);
    // a line's or box's tooltip (its <title>), made when the pointer first reaches it
    function tooltip(e) {
      const t = e.target, d = t.dataset, ex = ctx.ex;
      if (d.head === undefined || t.querySelector("title")) return;
      const title = document.createElementNS(NS, "title");
      title.textContent = `head ${ex.heads[+d.head]}: ${ex.tokens[+d.i]} → ${ex.tokens[+d.j]}, weight ${(+d.w).toFixed(3)}`;
      t.append(title);
    }
    gLines.addEventListener("mouseover", tooltip);
    gBoxes.addEventListener("mouseover", tooltip);
    const active = () => st.on.reduce((a, v) => a + (v ? 1 : 0), 0);

    function setHeads(on) {
      st.on = on;
      chips.querySelectorAll(".chip").forEach((x) => { x.dataset.on = st.on[+x.dataset.head] ? 1 : 0; });
      draw();
    }
    function build() {
      const ex = ctx.ex, L = ex.layers.length;
      st.layer = Math.min(st.layer, L - 1);
      if (!st.on || st.on.length !== ex.heads.length) st.on = ex.heads.map(() => true);
      controls.innerHTML = "";
      controls.append(JX.el("label", {}, "Layer ", JX.select("hv-layer",
        ex.layers.map((l, i) => [i, String(l)]), st.layer, (v) => { st.layer = +v; draw(); })));
      const gen = JX.generatedStart(ex);
      if (ex.sentence_b_start !== null) {
        const opts = [["all", "all"], ["AA", "A → A"], ["AB", "A → B"], ["BA", "B → A"], ["BB", "B → B"]];
        if (!opts.some(([v]) => v === st.filter)) st.filter = "all";
        controls.append(JX.el("label", {}, "Sentences ", JX.select("hv-filter", opts, st.filter,
          (v) => { st.filter = v; st.pinned = null; build(); draw(); })));
      } else if (gen !== null) {
        // a decoder's continuation: "P"rompt, "G"enerated, "*" all (JX.span)
        const opts = [["all", "all"], ["G*", "generated → all"], ["GP", "generated → prompt"],
          ["GG", "generated → generated"], ["PP", "prompt → prompt"]];
        if (!opts.some(([v]) => v === st.filter)) st.filter = "all";
        controls.append(JX.el("label", {}, "Tokens ", JX.select("hv-filter", opts, st.filter,
          (v) => { st.filter = v; st.pinned = null; build(); draw(); })));
      } else st.filter = "all";
      const min = JX.el("input", { id: "hv-min", type: "number", min: 0, max: 1, step: 0.01, value: st.min });
      min.addEventListener("change", () => { st.min = Math.max(0, +min.value || 0); draw(); });
      controls.append(JX.el("label", {}, "Hide weights below ", min));
      if (ex.long) longControls(ex);
      else if (ex.T > WINDOW) windowControls(ex);
      else st.lo = 0;
      chips.innerHTML = "";
      chips.append(
        JX.el("button", { id: "hv-all", class: "hv-toggle", title: "show every head",
          on: { click: () => setHeads(ex.heads.map(() => true)) } }, "all"),
        JX.el("button", { id: "hv-none", class: "hv-toggle", title: "hide every head (then click heads to add them)",
          on: { click: () => setHeads(ex.heads.map(() => false)) } }, "none"));
      ex.heads.forEach((h, hi) => {
        const c = JX.el("span", { class: "chip", "data-head": hi, "data-on": st.on[hi] ? 1 : 0,
          title: `head ${h}: click to toggle, double-click for this head only`,
          style: `background:${JX.headColor(h)}` }, String(h));
        c.addEventListener("click", () => { st.on[hi] = !st.on[hi]; c.dataset.on = st.on[hi] ? 1 : 0; draw(); });
        c.addEventListener("dblclick", () => setHeads(st.on.map((_, k) => k === hi)));
        chips.append(c);
      });
      // tokens: the left column holds the queries, the right the keys
      const [ql, qh] = rows("left"), [kl, kh] = rows("right");
      const n = Math.max(qh - ql, kh - kl);
      svg.setAttribute("width", XT + COLW);
      svg.setAttribute("height", n * RH + 2 * PAD);
      let s = "";
      for (const [side, lo, hi, x, anchor] of [["left", ql, qh, COLW - 4, "end"], ["right", kl, kh, XT, "start"]]) {
        for (let i = lo; i < hi; i++) {
          const cls = gen !== null && i >= gen ? "tok gen" : "tok";
          s += `<text class="${cls}" data-side="${side}" data-idx="${i}" x="${x}" y="${y(i - lo) + 4}" text-anchor="${anchor}">${JX.esc(ex.tokens[i])}</text>`;
        }
        // the prompt's end: a dashed rule (a path: no line of the weights) between its last token and the first generated one
        if (gen !== null && gen > lo && gen < hi) {
          const [x1, x2] = side === "left" ? [0, X1] : [X2, XT + COLW], yy = y(gen - lo) - RH / 2;
          s += `<path class="hv-gen" data-side="${side}" data-at="${gen}" d="M${x1} ${yy}H${x2}"/>`;
        }
      }
      gToks.innerHTML = s;
      gToks.querySelectorAll("text.tok").forEach((t) => {
        const sel = { side: t.dataset.side, idx: +t.dataset.idx };
        t.addEventListener("mouseenter", () => { st.hover = sel; draw(); });
        t.addEventListener("mouseleave", () => { st.hover = null; draw(); });
        t.addEventListener("click", () => {
          const same = st.pinned && st.pinned.side === sel.side && st.pinned.idx === sel.idx;
          st.pinned = same ? null : sel;
          if (ctx.ex.long && !same) { st.center = sel.idx; st.hover = null; build(); }
          draw();
        });
      });
    }
    /** The search box: Enter finds the next token containing its text, moves the window to
     * it (`go(i)`) and pins it. */
    function findBox(ex, go) {
      const find = JX.el("input", { id: "hv-find", type: "search", placeholder: "find a token", size: 12 });
      find.addEventListener("keydown", (e) => {
        if (e.key !== "Enter") return;
        const q = find.value.trim().toLowerCase(), T = ex.T;
        if (!q) return;
        for (let k = 1; k <= T; k++) {
          const i = (st.found + k) % T;
          if (ex.tokens[i].toLowerCase().includes(q)) {
            st.found = i; go(i); st.pinned = { side: "left", idx: i };
            build(); draw();
            const f = controls.querySelector("#hv-find");
            f.value = find.value; f.focus();
            return;
          }
        }
        find.setCustomValidity("no such token"); find.reportValidity();
      });
      find.addEventListener("input", () => find.setCustomValidity(""));
      return find;
    }
    /** A long text's window: the first token shown, and a search that moves to a token. */
    function windowControls(ex) {
      st.lo = Math.max(0, Math.min(st.lo, ex.T - WINDOW));
      const from = JX.el("input", { id: "hv-from", type: "number", min: 0, max: ex.T - WINDOW, step: 10, value: st.lo });
      from.addEventListener("change", () => {
        st.lo = Math.max(0, Math.min(ex.T - WINDOW, Math.round(+from.value || 0)));
        st.pinned = null; build(); draw();
      });
      const find = findBox(ex, (i) => { st.lo = Math.max(0, Math.min(ex.T - WINDOW, i - WINDOW / 2)); });
      controls.append(JX.el("label", { id: "hv-window", "data-lo": st.lo, "data-hi": st.lo + WINDOW },
        `Tokens ${WINDOW} of ${ex.T}, from `, from), find);
    }
    /** A long text's window: its centre, and a search that centres it on a token. */
    function longControls(ex) {
      st.center = Math.max(0, Math.min(ex.T - 1, st.center));
      const [lo, hi] = JX.around(st.center, ex.T, RADIUS);
      const at = JX.el("input", { id: "hv-at", type: "number", min: 0, max: ex.T - 1, step: 1, value: st.center });
      at.addEventListener("change", () => {
        st.center = Math.max(0, Math.min(ex.T - 1, Math.round(+at.value || 0)));
        st.pinned = null; build(); draw();
      });
      const find = findBox(ex, (i) => { st.center = i; });
      controls.append(JX.el("label", { id: "hv-window", "data-lo": lo, "data-hi": hi, "data-center": st.center },
        `Tokens ${lo}–${hi - 1} of ${ex.T}, around `, at), find);
    }
    const y = (r) => PAD + r * RH + RH / 2;
    function rows(side) {
      const f = st.filter === "all" ? null : st.filter[side === "left" ? 0 : 1];
      const [a, b] = JX.span(ctx.ex, f || "all");
      if (ctx.ex.long) {
        const [lo, hi] = JX.around(st.center, ctx.ex.T, RADIUS);
        return [Math.max(a, lo), Math.max(Math.max(a, lo), Math.min(b, hi))];
      }
      if (ctx.ex.T <= WINDOW) return [a, b];
      return [Math.max(a, st.lo), Math.max(Math.max(a, st.lo), Math.min(b, st.lo + WINDOW))];
    }
    /** Calls f(i, j, hi, w) for every candidate line of the current selection. */
    function each(f) {
      const ex = ctx.ex, t = ex._t.weights[ctx.state.kind], T = ex.T;
      let [ql, qh] = rows("left"), [kl, kh] = rows("right");
      const sel = st.pinned || st.hover;
      if (sel && sel.side === "left") { ql = Math.max(ql, sel.idx); qh = Math.min(qh, sel.idx + 1); }
      if (sel && sel.side === "right") { kl = Math.max(kl, sel.idx); kh = Math.min(kh, sel.idx + 1); }
      for (let hi = 0; hi < ex.heads.length; hi++) {
        if (!st.on[hi]) continue;
        const at = JX.weightAt(t, st.layer, hi, T);
        for (let i = ql; i < qh; i++) {
          const end = ex.causal ? Math.min(kh, i + 1) : kh;
          for (let j = kl; j < end; j++) { const w = at(i, j); if (w > 0) f(i, j, hi, w); }
        }
      }
    }
    /** The boxes beside the tokens the selected token attends to (or is attended by). */
    function boxes(sel, n) {
      if (!sel || !n) return "";
      const ex = ctx.ex, t = ex._t.weights[ctx.state.kind], T = ex.T;
      const other = sel.side === "left" ? "right" : "left", [lo, hi] = rows(other);
      const x0 = other === "right" ? XR : XL, bw = BOXW / n, parts = [];
      let slot = 0;
      for (let h = 0; h < ex.heads.length; h++) {
        if (!st.on[h]) continue;
        const at = JX.weightAt(t, st.layer, h, T), color = JX.headColor(ex.heads[h]), x = x0 + slot * bw;
        for (let k = lo; k < hi; k++) {
          const [i, j] = sel.side === "left" ? [sel.idx, k] : [k, sel.idx];
          if (ex.causal && j > i) continue;  // the masked future: nothing drawn
          const w = at(i, j);
          if (!(w > 0)) continue;  // as the lines: none for a zero weight
          parts.push(`<rect class="hv-box" data-side="${other}" data-idx="${k}" data-i="${i}" data-j="${j}" data-head="${h}" data-w="${w}" x="${x}" y="${y(k - lo) - RH / 2 + 1}" width="${bw}" height="${RH - 2}" fill="${color}" fill-opacity="${w}"/>`);
        }
        slot++;
      }
      return parts.join("");
    }
    function draw() {
      const ex = ctx.ex, n = active(), sel = st.pinned || st.hover;
      // pass 1: a histogram of the weights above the user's minimum
      const bins = new Uint32Array(BINS), most = sel ? TOKEN_MAX_LINES : MAX_LINES;
      let total = 0;
      each((i, j, hi, w) => { if (w >= st.min) { total++; bins[bin(w)]++; } });
      // Over `most` lines: every line of the bins above `edge`, then the cut bin's
      // first ones until `most` (they differ by under 2.2%: one bin).
      let cut = st.min, edge = -1, room = 0;
      if (total > most) {
        let acc = 0, b = BINS - 1;
        while (b > 0 && acc + bins[b] <= most) acc += bins[b--];
        edge = b; room = most - acc;
        cut = Math.max(st.min, 2 ** (b / OCTAVE - 24));
      }
      // pass 2: the lines themselves, as one markup string (fast for thousands)
      const [ql] = rows("left"), [kl] = rows("right"), parts = [];
      each((i, j, hi, w) => {
        if (w < st.min) return;
        if (edge >= 0) {
          const k = bin(w);
          if (k < edge || (k === edge && room-- <= 0)) return;
        }
        parts.push(`<line data-i="${i}" data-j="${j}" data-head="${hi}" data-w="${w}" x1="${X1}" y1="${y(i - ql)}" x2="${X2}" y2="${y(j - kl)}" stroke="${JX.headColor(ex.heads[hi])}" stroke-opacity="${w / n}"/>`);
      });
      gLines.innerHTML = parts.join("");
      Object.assign(svg.dataset, { min: String(cut), drawn: String(parts.length), candidates: String(total), active: String(n) });
      gBoxes.innerHTML = boxes(sel, n);
      gToks.querySelectorAll("text.tok").forEach((t) => {
        t.classList.toggle("sel", !!sel && t.dataset.side === sel.side && +t.dataset.idx === sel.idx);
      });
      legend.textContent = n ? `Line opacity = ${NORMS[ctx.state.kind]} / ${n} active head${n > 1 ? "s" : ""} (as BertViz); ` +
        "hover a line for its head and weight. Hover a token: one box per active head beside the tokens it attends to, opacity = weight." +
        (ex.causal ? ` ${JX.CAUSAL_NOTE}` : "") +
        (JX.generatedStart(ex) !== null ? ` ${JX.GENERATED_NOTE(JX.generatedStart(ex))}` : "")
        : "No head selected: click a head or “all”.";
      legend.dataset.causal = ex.causal ? 1 : 0;
      info.textContent = `Layer ${ex.layers[st.layer]}, ${JX.KIND_TITLES[ctx.state.kind]}: ` +
        (parts.length < total ? `showing the ${parts.length} strongest of ${total} lines (weights ≥ ${cut.toPrecision(3)})` +
          (sel ? "." : "; hover or click a token for its own lines.") : `${parts.length} lines.`) +
        " Hover a token to isolate its lines; click to pin.";
      firstToken(sel, n);
    }
    /** A long example's query outside the first token's window: its weight on that token
     * (the sink) per active head, from the page's first-token column. */
    function firstToken(sel, n) {
      const ex = ctx.ex, col = ex.long && ex._t.first[ctx.state.kind];
      const [kl] = rows("right");
      sink.hidden = !(col && sel && sel.side === "left" && kl > 0 && n);
      if (sink.hidden) return;
      const parts = [], values = [];
      ex.heads.forEach((h, hi) => {
        if (!st.on[hi]) return;
        const w = col.at(col.base(st.layer, hi, sel.idx));
        values.push(w); parts.push(`head ${h} ${w.toFixed(3)}`);
      });
      sink.dataset.weights = values.join(",");
      sink.dataset.query = String(sel.idx);
      sink.textContent = `${ex.tokens[sel.idx]} (${sel.idx}) on the first token ${ex.tokens[0]}, outside the window: ${parts.join(", ")}.`;
    }
    return {
      el,
      render() { build(); draw(); },
      reset() { st.pinned = null; st.hover = null; st.on = null; st.lo = 0; st.found = -1; st.center = 0; },
      select(layer, heads) { st.layer = layer; st.on = ctx.ex.heads.map((_, k) => heads.includes(k)); },
      /** Show the window of tokens from `lo` (a long text's). */
      show(lo) { st.lo = lo; },
    };
  };
})();
