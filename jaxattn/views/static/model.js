/* Model view: every layer x head as a heatmap thumbnail (row i = query token,
 * column j = key token, pixel alpha = weight, in the head's colour); click one
 * to enlarge it. Thumbnails are drawn only when scrolled into view
 * (IntersectionObserver) at min(T, THUMB) pixels: above THUMB tokens, a map is
 * MAX-POOLED, as the static export (drawing.max_pool, the same blocks): a pixel
 * holds the largest weight of its block of (query, key) cells, so one-cell
 * stripes ([SEP] columns, the diagonal) keep their full weight where an average
 * would fade them. A colour bar states the scale (0 to 1: the opacity of the
 * head's colour).
 * A LONG example (ex.long, long_maps.py) holds its maps max-pooled to 256 x 256 in
 * Python over the same blocks: the thumbnails pool those further (the blocks nest) and
 * the enlarged map shows them at 2 px a block; its readout names the block's tokens.
 * JX.colorBar (here, used by every view) draws such bars.
 * A decoder's continuation (ex.generated_start) is said in the info line; an enlarged
 * map draws a dashed row and column where the generated tokens start and labels them
 * in their colour (canvas#mv-big[data-generated]).
 * DOM hooks: canvas.thumb[data-layer][data-head][data-res], canvas#mv-big,
 * #mv-cbar, #mv-big-cbar (.jx-cbar[data-min][data-max]). */
"use strict";
(function () {
  const JX = window.JaxattnViews;
  const THUMB = 64, BIG = 560;
  /** Paint map [T x T] of (layer, head) max-pooled to res x res into an ImageData: block r
   * holds the cells floor(r T / res) .. floor((r + 1) T / res) - 1 of each axis. A causal
   * map pools the cells j <= i only; a pixel with none (c > r) is JX.MASKED. */
  function paint(img, t, layer, hi, T, res, color, causal) {
    const v = new Float32Array(res * res).fill(-Infinity), blk = new Int32Array(T);
    for (let r = 0; r < res; r++) for (let i = Math.floor((r * T) / res); i < Math.floor(((r + 1) * T) / res); i++) blk[i] = r;
    const base = t.base(layer, hi, 0, 0), d = t.data, sc = t.exact ? 1 : t.scale, off = t.exact ? 0 : t.offset;
    for (let i = 0; i < T; i++) {
      const row = blk[i] * res, n = causal ? i + 1 : T;
      for (let j = 0; j < n; j++) {
        const w = d[base + i * T + j] * sc + off, k = row + blk[j];
        if (w > v[k]) v[k] = w;
      }
    }
    const px = img.data;
    for (let r = 0; r < res; r++) {
      for (let c = 0; c < res; c++) {
        const k = 4 * (r * res + c), w = v[r * res + c];
        if (causal && c > r) { px.set(JX.MASKED, k); continue; }
        px[k] = color[0]; px[k + 1] = color[1]; px[k + 2] = color[2];
        px[k + 3] = Math.round(255 * Math.min(1, Math.max(0, w)));
      }
    }
  }
  JX.paintMap = paint;
  const fmt = (v) => String(+(+v).toPrecision(3));
  /** A colour bar: `label`, then min, a `width` px gradient through the CSS colours `stops`, max.
   * DOM hook: .jx-cbar[data-min][data-max] with .jx-cbar-min, .jx-cbar-ramp, .jx-cbar-max. */
  JX.colorBar = function (id, stops, lo, hi, label, width = 96) {
    const small = "font-size:11px;color:#555";
    return JX.el("span", { class: "jx-cbar", id, "data-min": lo, "data-max": hi,
      style: `display:inline-flex;align-items:center;gap:4px;margin-right:14px;${small}` },
    label ? JX.el("span", { class: "jx-cbar-label" }, label) : null,
    JX.el("span", { class: "jx-cbar-min" }, fmt(lo)),
    JX.el("span", { class: "jx-cbar-ramp", style: `display:inline-block;width:${width}px;height:10px;` +
      `border:1px solid #bbb;background:linear-gradient(to right, ${stops.join(", ")})` }),
    JX.el("span", { class: "jx-cbar-max" }, fmt(hi)));
  };
  JX.views.model = function (ctx) {
    const el = JX.el("div", { class: "mv" });
    const info = JX.el("div", { class: "info", id: "mv-info" });
    const scale = JX.el("div", { class: "info", id: "mv-scale" });
    const grid = JX.el("div", { class: "mv-grid", id: "mv-grid" });
    const detail = JX.el("div", { class: "mv-detail", id: "mv-detail", hidden: true });
    el.append(info, scale, JX.el("div", { class: "mv-wrap" }, grid, detail));
    const visible = new Set(), dirty = new Set();
    let open = null;
    const io = new IntersectionObserver((entries) => {
      for (const e of entries) {
        if (e.isIntersecting) { visible.add(e.target); if (dirty.has(e.target)) drawThumb(e.target); }
        else visible.delete(e.target);
      }
    });
    /** [tensor, size] the maps are painted from: the weights, or a long example's pooled maps. */
    const source = (ex) => (ex.long ? [ex._t.pooled[ctx.state.kind], ex._t.pooled[ctx.state.kind].shape[2]]
      : [ex._t.weights[ctx.state.kind], ex.T]);
    function drawThumb(c) {
      dirty.delete(c);
      const ex = ctx.ex, res = +c.dataset.res, g = c.getContext("2d");
      const img = g.createImageData(res, res), hi = +c.dataset.head, [src, n] = source(ex);
      paint(img, src, +c.dataset.layer, hi, n, res, JX.rgb(JX.headColor(ex.heads[hi])), ex.causal);
      g.putImageData(img, 0, 0);
      c.dataset.drawn = ctx.state.kind;
    }
    function build() {
      const ex = ctx.ex, res = Math.min(ex.T, THUMB);
      io.disconnect(); visible.clear(); dirty.clear();
      grid.innerHTML = "";
      grid.style.gridTemplateColumns = `3em repeat(${ex.heads.length}, ${THUMB + 4}px)`;
      grid.append(JX.el("div", {}));
      ex.heads.forEach((h) => grid.append(JX.el("div", { class: "mv-col" }, `H${h}`)));
      ex.layers.forEach((l, li) => {
        grid.append(JX.el("div", { class: "mv-row" }, `L${l}`));
        ex.heads.forEach((h, hi) => {
          const c = JX.el("canvas", { class: "thumb", width: res, height: res, "data-layer": li, "data-head": hi,
            "data-res": res, title: `layer ${l}, head ${h}: click to enlarge` });
          c.addEventListener("click", () => enlarge(li, hi));
          dirty.add(c); grid.append(c); io.observe(c);
        });
      });
      info.textContent = `${ex.layers.length} layers × ${ex.heads.length} heads, ${JX.KIND_TITLES[ctx.state.kind]}; ` +
        `rows are query tokens, columns key tokens${ex.T > THUMB ? ` (max-pooled to ${THUMB} px: a pixel ` +
        "shows the strongest weight of its block, so [SEP] columns and diagonals stay visible)" : ""}. Click a map to enlarge it.` +
        (ex.long ? ` A long example: the file holds each map max-pooled to ${source(ex)[1]} px (the head view shows single tokens).` : "") +
        (ex.causal ? ` ${JX.CAUSAL_MAP_NOTE}` : "") +
        (JX.generatedStart(ex) !== null ? ` ${JX.GENERATED_NOTE(JX.generatedStart(ex))} ` +
          "An enlarged map marks it with a dashed row and column." : "");
      info.dataset.causal = ex.causal ? 1 : 0;
      scale.innerHTML = "";
      scale.append(JX.colorBar("mv-cbar", ["rgba(60,60,60,0)", "rgb(60,60,60)"], 0, 1,
        `colour scale: ${ex.T > THUMB ? "max-pooled " : ""}weight = opacity of the head's colour`));
      if (open) enlarge(...open);
    }
    function enlarge(li, hi) {
      open = [li, hi];
      // Up to BIG tokens a cell is a whole number of px (up to 24); past that the map is
      // max-pooled to BIG px (as the thumbnails), so no cell is lost to the browser's scaling.
      const ex = ctx.ex, T = ex.T, [src, n] = source(ex), res = Math.min(n, BIG);
      const cell = Math.max(1, Math.min(24, Math.floor(BIG / n)));
      const pitch = (res * cell) / T;  // px per token
      // Every token labelled while a token has 11 px or more; below that the labels
      // are thinned to 11 px apart (JX.thinTicks: [CLS]/[SEP] first).
      const lab = 90, size = lab + res * cell, ticks = JX.thinTicks(ex.tokens, pitch);
      const c = JX.el("canvas", { id: "mv-big", width: size, height: size, "data-layer": li, "data-head": hi, "data-cell": cell, "data-label": lab, "data-res": res });
      const g = c.getContext("2d"), img = g.createImageData(res, res);
      paint(img, src, li, hi, n, res, JX.rgb(JX.headColor(ex.heads[hi])), ex.causal);
      const tmp = JX.el("canvas", { width: res, height: res });
      tmp.getContext("2d").putImageData(img, 0, 0);
      g.imageSmoothingEnabled = false;
      g.drawImage(tmp, lab, lab, res * cell, res * cell);
      g.font = `${Math.max(9, Math.min(12, cell))}px sans-serif`; g.fillStyle = "#333"; g.textBaseline = "middle";
      const gen = JX.generatedStart(ex);
      ticks.forEach((i) => {
        const tok = ex.tokens[i];
        g.fillStyle = gen !== null && i >= gen ? "#b35900" : "#333";
        g.textAlign = "right"; g.fillText(tok, lab - 3, lab + (i + 0.5) * pitch, lab - 4);
        g.save(); g.translate(lab + (i + 0.5) * pitch, lab - 3); g.rotate(-Math.PI / 2);
        g.textAlign = "left"; g.fillText(tok, 0, 0, lab - 4); g.restore();
      });
      c.dataset.ticks = ticks.join(",");
      if (gen !== null && gen > 0 && gen < T) {  // the prompt's end: dashed, row and column
        const at = lab + gen * pitch;
        g.save(); g.strokeStyle = "#b35900"; g.setLineDash([4, 3]); g.beginPath();
        g.moveTo(lab, at); g.lineTo(size, at); g.moveTo(at, lab); g.lineTo(at, size);
        g.stroke(); g.restore();
        c.dataset.generated = gen;
      }
      const readout = JX.el("div", { id: "mv-readout", class: "info" }, "Hover a cell.");
      c.addEventListener("mousemove", (e) => {
        const r = c.getBoundingClientRect(), k = c.width / r.width;
        const j = Math.floor(((e.clientX - r.left) * k - lab) / pitch), i = Math.floor(((e.clientY - r.top) * k - lab) / pitch);
        if (i < 0 || j < 0 || i >= T || j >= T) return;
        const t = ex._t.weights[ctx.state.kind];
        if (ex.long) {  // the pooled block under the pointer: its tokens and largest weight
          const r = Math.floor((i * res) / T), q = Math.floor((j * res) / T), edge = (b) => Math.floor((b * T) / res);
          readout.textContent = `tokens ${edge(r)}–${edge(r + 1) - 1} → ${edge(q)}–${edge(q + 1) - 1}: ` +
            (ex.causal && q > r ? "masked (later tokens)" : `largest weight ${src.at(src.base(li, hi, r, q)).toFixed(4)}`) +
            ` (the map is max-pooled to ${res} px; the head view shows single tokens)`;
          return;
        }
        readout.textContent = `${ex.tokens[i]} (${i}) → ${ex.tokens[j]} (${j}): ` +
          (ex.causal && j > i ? "masked (a later token)" : t.at(t.base(li, hi, i, j)).toFixed(4)) +
          (res < T ? ` (the map is max-pooled to ${res} px)` : "");
      });
      const toHead = JX.el("button", { id: "mv-to-head", on: { click: () => {
        if (!ctx.views.head) ctx.show("head");
        ctx.views.head.select(li, [hi]); ctx.views.head.render(); ctx.show("head");
      } } }, "Open in head view");
      const close = JX.el("button", { on: { click: () => { open = null; detail.hidden = true; } } }, "Close");
      detail.innerHTML = "";
      const bar = JX.colorBar("mv-big-cbar", ["#fff", JX.headColor(ex.heads[hi])], 0, 1, "weight");
      detail.append(JX.el("h3", {}, `Layer ${ex.layers[li]}, head ${ex.heads[hi]}`), bar, c, readout,
        ctx.doc.views.includes("head") ? toHead : null, close);
      detail.hidden = false;
    }
    return {
      el,
      render() {
        build();
        // IntersectionObserver reports soon; draw what is on screen now as well
        requestAnimationFrame(() => grid.querySelectorAll("canvas.thumb").forEach((c) => {
          const r = c.getBoundingClientRect();
          if (dirty.has(c) && r.bottom > 0 && r.top < innerHeight && r.width > 0) drawThumb(c);
        }));
      },
      reset() { open = null; detail.hidden = true; },
    };
  };
})();
