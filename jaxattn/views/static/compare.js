/* jaxattn compare: A | B | B - A heat maps of one head with linked hover, and an
 * overview of every (layer, head) coloured by a difference summary. Uses core.js
 * (JaxattnViews: el, select, unpack, loadExample). Data: compare_page.py.
 * Two decoders' example (meta.causal) draws its masked future (j > i) as the model
 * view does: JX.MASKED grey, hatched here (a weight is a grey too), and says so
 * (JX.CAUSAL_MAP_NOTE in #cmp-level); DOM hooks: canvas.cmp-map[data-causal]. */
"use strict";
(function () {
  const JX = window.JaxattnViews;
  const CMP = (window.JaxattnCompare = {});
  const CSS = `
.cmp-sides { margin: 6px 0; } .cmp-sides b { display: inline-block; width: 1.4em; }
.cmp-level { color: #555; font-size: 12px; margin: 2px 0 6px; }
.cmp-panels { display: flex; flex-wrap: wrap; gap: 14px; align-items: flex-start; }
.cmp-panels figure { margin: 0; } .cmp-panels figcaption { font-weight: 600; font-size: 12px; }
.cmp-panels canvas.cmp-map { border: 1px solid #ddd; display: block; }
.cmp-bar { display: flex; align-items: center; gap: 4px; font-size: 11px; color: #444; margin-top: 3px; }
#cmp-info { min-height: 1.4em; font-family: ui-monospace, monospace; font-size: 12px; margin: 6px 0; }
.cmp-grid { display: inline-grid; gap: 2px; align-items: center; }
.cmp-grid .lab { font-size: 11px; color: #666; text-align: center; }
.cmp-cell { width: 22px; height: 22px; border: 1px solid #ddd; cursor: pointer; }
.cmp-cell.on { outline: 2px solid #ff8c00; }`;
  const HI = "#ff8c00";
  const clamp = (x) => Math.max(-1, Math.min(1, x));
  /** Weight v in [0, 1] -> grey (white 0, black 1). */
  CMP.weightRgb = (v) => { const g = Math.round(255 * (1 - Math.max(0, Math.min(1, v)))); return [g, g, g]; };
  /** Difference d on a symmetric scale +-m -> blue (negative), white (0), red (positive). */
  CMP.diffRgb = (d, m) => {
    const t = m > 0 ? clamp(d / m) : 0, s = Math.round(255 * (1 - Math.abs(t)));
    return t >= 0 ? [255, s, s] : [s, s, 255];
  };
  /** Summary value v of a maximum `top` -> white to purple. */
  const summaryRgb = (v, top) => {
    const t = top > 0 ? Math.max(0, Math.min(1, v / top)) : 0;
    return [Math.round(255 - 138 * t), Math.round(255 - 191 * t), Math.round(255 - 93 * t)];
  };
  const css = (rgb) => `rgb(${rgb[0]},${rgb[1]},${rgb[2]})`;
  /** A signed difference with 3 significant digits (tf32-sized ones stay readable). */
  const fmt = (x) => (x >= 0 ? "+" : "−") + Math.abs(x).toPrecision(3);

  /** One heat map panel: a canvas with token labels, a cached matrix image, an outline. */
  function panel(id, caption) {
    const canvas = JX.el("canvas", { id, class: "cmp-map" });
    const fig = JX.el("figure", {}, JX.el("figcaption", { id: `${id}-caption` }, caption), canvas);
    return { id, canvas, fig, image: null };
  }
  function layout(p, tokens) {
    const U = tokens.length, C = Math.max(4, Math.min(24, Math.floor(360 / Math.max(U, 1))));
    const g = p.canvas.getContext("2d");
    g.font = "11px system-ui, sans-serif";
    const M = Math.min(110, Math.ceil(Math.max(0, ...tokens.map((t) => g.measureText(t).width))) + 8);
    p.canvas.width = M + U * C + 2; p.canvas.height = M + U * C + 2;
    Object.assign(p, { U, C, M, ticks: JX.thinTicks(tokens, C) });
    p.canvas.dataset.ox = M; p.canvas.dataset.oy = M; p.canvas.dataset.cell = C;
  }
  /** Fill the U x U matrix image: colour(i, j) -> [r, g, b]; a causal map's j > i: JX.MASKED. */
  function paint(p, colour) {
    const img = new ImageData(p.U || 1, p.U || 1);
    for (let i = 0; i < p.U; i++) {
      for (let j = 0; j < p.U; j++) {
        const o = 4 * (i * p.U + j), c = p.causal && j > i ? JX.MASKED : colour(i, j);
        img.data[o] = c[0]; img.data[o + 1] = c[1]; img.data[o + 2] = c[2]; img.data[o + 3] = 255;
      }
    }
    const off = document.createElement("canvas");
    off.width = img.width; off.height = img.height;
    off.getContext("2d").putImageData(img, 0, 0);
    p.image = off;
  }
  function draw(p, tokens, hi) {
    const g = p.canvas.getContext("2d"), { U, C, M } = p;
    g.clearRect(0, 0, p.canvas.width, p.canvas.height);
    g.fillStyle = "#fff"; g.fillRect(0, 0, p.canvas.width, p.canvas.height);
    g.imageSmoothingEnabled = false;
    if (p.image) g.drawImage(p.image, M, M, U * C, U * C);
    if (p.causal) hatch(g, p);
    g.font = "11px system-ui, sans-serif"; g.textBaseline = "middle";
    // The thinned labels (11 px apart), and the hovered row's and column's own in
    // black, its neighbours' labels left out where they would overprint it.
    const text = (t, on) => { g.fillStyle = on ? "#000" : "#555"; g.fillText(t, 0, 0); };
    const labels = (h) => p.ticks.filter((k) => h === undefined || h < 0 || k === h || Math.abs(k - h) * C >= 11)
      .concat(h >= 0 && !p.ticks.includes(h) ? [h] : []);
    labels(hi ? hi[0] : undefined).forEach((k) => {
      g.save(); g.textAlign = "right"; g.translate(M - 4, M + k * C + C / 2);
      text(tokens[k], hi && hi[0] === k); g.restore();
    });
    labels(hi ? hi[1] : undefined).forEach((k) => {
      g.save(); g.textAlign = "left"; g.translate(M + k * C + C / 2, M - 4); g.rotate(-Math.PI / 2);
      text(tokens[k], hi && hi[1] === k); g.restore();
    });
    p.canvas.dataset.rowLabels = labels(hi ? hi[0] : undefined).sort((a, b) => a - b).join(",");
    p.canvas.dataset.hi = hi ? `${hi[0]},${hi[1]}` : "";
    if (!hi) return;
    const [i, j] = hi, x = j < 0 ? M : M + j * C, y = i < 0 ? M : M + i * C;
    g.strokeStyle = HI; g.lineWidth = 2;
    g.strokeRect(x - 1, y - 1, (j < 0 ? U * C : C) + 2, (i < 0 ? U * C : C) + 2);
  }
  /** Hatch a causal map's masked future: the staircase of cells j > i. */
  function hatch(g, p) {
    const { U, C, M } = p;
    if (U < 2) return;
    g.save(); g.beginPath(); g.moveTo(M + C, M); g.lineTo(M + U * C, M); g.lineTo(M + U * C, M + (U - 1) * C);
    for (let i = U - 2; i >= 0; i--) { g.lineTo(M + (i + 1) * C, M + (i + 1) * C); g.lineTo(M + (i + 1) * C, M + i * C); }
    g.closePath(); g.clip();
    g.strokeStyle = "rgb(150,150,150)"; g.lineWidth = 1; g.beginPath();
    for (let s = -U * C; s < U * C; s += 6) { g.moveTo(M + s, M); g.lineTo(M + s + U * C, M + U * C); }
    g.stroke(); g.restore();
  }
  function colourBar(id, colour, lo, hi) {
    const c = JX.el("canvas", { id, width: 160, height: 10 });
    const g = c.getContext("2d");
    for (let x = 0; x < 160; x++) { g.fillStyle = css(colour(lo + ((hi - lo) * x) / 159)); g.fillRect(x, 0, 1, 10); }
    return c;
  }

  CMP.mount = function (root, header, text) {
    root.innerHTML = ""; root.classList.add("jx");
    document.head.append(JX.el("style", {}, CSS));
    const doc = JX.unpack(header, text), meta = header.examples;
    const start = header.start || { example: 0 }; // where the page opens (compare_page.py)
    const state = { example: start.example, l: 0, h: 0, summary: "mean_abs", hi: null };
    const panels = [panel("cmp-a", "A"), panel("cmp-b", "B"), panel("cmp-diff", "B − A")];
    const exSel = JX.select("example", doc.examples.map((e, i) => [i, e.label]), start.example, (v) => setExample(+v));
    if (doc.examples.length < 2) exSel.disabled = true;
    const lSel = JX.select("cmp-layer", [], 0, (v) => { state.l = +v; render(); });
    const hSel = JX.select("cmp-head", [], 0, (v) => { state.h = +v; render(); });
    const sSel = JX.select("cmp-summary", [["mean_abs", "mean |B − A| over the cells"],
      ["js", "Jensen–Shannon distance per row, averaged"]], "mean_abs", (v) => { state.summary = v; overview(); });
    const bar = JX.el("div", { class: "jx-bar" }, JX.el("label", {}, "Example ", exSel),
      JX.el("label", {}, "Layer ", lSel), JX.el("label", {}, "Head ", hSel));
    const sides = JX.el("div", { class: "cmp-sides" },
      JX.el("div", { id: "cmp-side-a" }, JX.el("b", {}, "A"), header.sides[0]),
      JX.el("div", { id: "cmp-side-b" }, JX.el("b", {}, "B"), header.sides[1]));
    const level = JX.el("div", { class: "cmp-level", id: "cmp-level" });
    const minEl = JX.el("span", { id: "cmp-min" }), maxEl = JX.el("span", { id: "cmp-max" });
    const diffBar = JX.el("div", { class: "cmp-bar" }, minEl,
      colourBar("cmp-bar", (x) => CMP.diffRgb(x, 1), -1, 1), maxEl);
    const wBar = (id) => JX.el("div", { class: "cmp-bar" }, "0", colourBar(id, CMP.weightRgb, 0, 1), "1");
    panels[0].fig.append(wBar("cmp-wbar-a")); panels[1].fig.append(wBar("cmp-wbar-b"));
    panels[2].fig.append(diffBar);
    const info = JX.el("div", { id: "cmp-info" }), top = JX.el("span", { id: "cmp-top" });
    const grid = JX.el("div", { class: "cmp-grid", id: "cmp-grid" });
    root.append(bar, sides, level, JX.el("div", { class: "cmp-panels" }, ...panels.map((p) => p.fig)), info,
      JX.el("h3", {}, "Which heads differ"), JX.el("div", { class: "cmp-level" },
        "One cell per layer × head of this example (click one to show it), coloured by ", sSel,
        ": white 0 to purple ", top, ".", JX.el("span", { id: "cmp-causal-summary" })), grid);

    const ex = () => doc.examples[state.example];
    const at = (w, i, j) => w.at(w.base(state.l, state.h, i, j));
    /** B − A at (i, j): the embedded difference (uint8 pages: q × the head's step), else B − A. */
    const diff = (i, j) => {
      const t = ex()._t.weights;
      return t.d ? at(t.d, i, j) * t.d_step.at(t.d_step.base(state.l, state.h)) : at(t.b, i, j) - at(t.a, i, j);
    };
    const vals = (i, j) => { const t = ex()._t.weights; return [at(t.a, i, j), at(t.b, i, j), diff(i, j)]; };
    function hover(hi) {
      state.hi = hi;
      panels.forEach((p) => draw(p, ex().tokens, hi));
      const tk = ex().tokens;
      if (!hi) { info.textContent = ""; return; }
      if (hi[0] < 0 || hi[1] < 0) { info.textContent = hi[0] < 0 ? `key ${tk[hi[1]]}` : `query ${tk[hi[0]]}`; return; }
      if (meta[state.example].causal && hi[1] > hi[0]) {
        info.textContent = `${tk[hi[0]]} → ${tk[hi[1]]}: masked (a later token; 0 on both sides)`; return;
      }
      const [a, b, d] = vals(hi[0], hi[1]);
      info.textContent = `${tk[hi[0]]} → ${tk[hi[1]]}: A ${a.toFixed(4)}  B ${b.toFixed(4)}  B − A ${fmt(d)}`;
    }
    panels.forEach((p) => {
      p.canvas.addEventListener("mousemove", (e) => {
        const j = Math.floor((e.offsetX - p.M) / p.C), i = Math.floor((e.offsetY - p.M) / p.C);
        const inI = i >= 0 && i < p.U, inJ = j >= 0 && j < p.U;
        const hi = inI && inJ ? [i, j] : inI && e.offsetX < p.M ? [i, -1] : inJ && e.offsetY < p.M ? [-1, j] : null;
        if (String(hi) !== String(state.hi)) hover(hi);
      });
      p.canvas.addEventListener("mouseleave", () => hover(null));
    });
    function overview() {
      const m = meta[state.example], s = m.summary[state.summary], e = ex();
      const most = Math.max(0, ...s.flat());
      top.textContent = most.toPrecision(3);
      grid.innerHTML = ""; grid.style.gridTemplateColumns = `auto repeat(${e.heads.length}, 24px)`;
      grid.append(JX.el("span", { class: "lab" }), ...e.heads.map((h) => JX.el("span", { class: "lab" }, `H${h}`)));
      e.layers.forEach((layer, l) => {
        grid.append(JX.el("span", { class: "lab" }, `L${layer}`));
        e.heads.forEach((head, h) => {
          const v = s[l][h];
          grid.append(JX.el("div", {
            class: `cmp-cell${l === state.l && h === state.h ? " on" : ""}`, "data-layer": layer, "data-head": head,
            "data-value": v, title: `layer ${layer} head ${head}: mean |B−A| ${m.summary.mean_abs[l][h].toPrecision(3)}, `
              + `JS distance ${m.summary.js[l][h].toPrecision(3)}`, style: `background:${css(summaryRgb(v, most))}`,
            on: { click: () => { state.l = l; state.h = h; lSel.value = String(l); hSel.value = String(h); render(); } },
          }));
        });
      });
    }
    function render() {
      const e = ex(), m = meta[state.example], t = e._t.weights, scale = m.max_abs[state.l][state.h];
      panels.forEach((p) => { layout(p, e.tokens); p.causal = !!m.causal; p.canvas.dataset.causal = m.causal ? 1 : 0; });
      paint(panels[0], (i, j) => CMP.weightRgb(at(t.a, i, j)));
      paint(panels[1], (i, j) => CMP.weightRgb(at(t.b, i, j)));
      paint(panels[2], (i, j) => CMP.diffRgb(diff(i, j), scale));
      panels[2].canvas.dataset.scale = scale;
      minEl.textContent = `−${scale.toPrecision(3)}`; maxEl.textContent = `+${scale.toPrecision(3)}`;
      const where = `layer ${e.layers[state.l]}, head ${e.heads[state.h]}`;
      panels[0].fig.firstChild.textContent = `A · ${where}`;
      panels[1].fig.firstChild.textContent = `B · ${where}`;
      panels[2].fig.firstChild.textContent = `B − A · ${where} (scale ±max|B − A| of this head${t.d ? "; the page's difference is within max|B − A|/254" : ""})`;
      hover(null); overview();
      root.dataset.layer = String(e.layers[state.l]); root.dataset.head = String(e.heads[state.h]);
      root.dataset.rendered = String(+(root.dataset.rendered || 0) + 1);
    }
    function options(sel, values, prefix) {
      sel.innerHTML = "";
      values.forEach((v, k) => sel.append(JX.el("option", { value: k }, `${prefix} ${v}`)));
    }
    async function setExample(i) {
      root.dataset.state = "loading";
      try {
        await JX.loadExample(doc.examples[i]);
        state.example = i; exSel.value = String(i);
        const e = ex();
        options(lSel, e.layers, "layer"); options(hSel, e.heads, "head");
        state.l = Math.min(state.l, e.layers.length - 1); state.h = Math.min(state.h, e.heads.length - 1);
        lSel.value = String(state.l); hSel.value = String(state.h);
        level.textContent = meta[i].level === "word"
          ? "Compared word by word: the tokenisers differ, so rows and columns are the coarsest words both "
            + "share (A's words merged where B has no boundary between them, and B's where A has none: "
            + "aren ' t against aren 't is one unit aren't). Clark et al.: a key word sums its pieces, a query "
            + "word averages them; special tokens left out."
          : "Compared token by token (A and B have the same tokens).";
        if (meta[i].causal) level.textContent += ` ${JX.CAUSAL_MAP_NOTE}`;
        root.querySelector("#cmp-causal-summary").textContent = meta[i].causal
          ? " Two decoders: over the cells their rows see (j ≤ i), from the second token on when compared token by token (the first sees only itself on both sides)."
          : "";
        root.dataset.example = String(i);
        render();
        root.dataset.state = "ready";
      } catch (err) {
        root.dataset.state = "error";
        root.append(JX.el("div", { class: "jx-error", id: "jx-error" }, `Error: ${err && err.message ? err.message : err}`));
      }
    }
    return { ready: setExample(start.example), state };
  };
})();
