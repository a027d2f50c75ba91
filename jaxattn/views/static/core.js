/* jaxattn views: decoding, shared state and the page frame (example selector,
 * weight-kind switch, view tabs). Each view file registers JX.views[name] =
 * function (ctx) -> {el, render()}. No network: the data is passed to mount(). */
"use strict";
(function () {
  const JX = (window.JaxattnViews = window.JaxattnViews || {});
  JX.views = JX.views || {};
  JX.VIEW_TITLES = { head: "Head view", model: "Model view", neuron: "Neuron view", stats: "Stats view" };
  JX.KIND_TITLES = { attention: "attention α", norm: "norm-based ‖αf(x)‖ (rows normalised)" };
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"];
  JX.headColor = (h) => (h < PALETTE.length ? PALETTE[h] : `hsl(${(h * 137.5) % 360},60%,45%)`);
  JX.rgb = (css) => {
    if (css[0] === "#") return [1, 3, 5].map((k) => parseInt(css.slice(k, k + 2), 16));
    const c = document.createElement("canvas").getContext("2d");
    c.fillStyle = css; c.fillRect(0, 0, 1, 1);
    return Array.from(c.getImageData(0, 0, 1, 1).data.slice(0, 3));
  };

  /** el("div", {class: "x", "data-i": 3}, child, "text", ...) */
  JX.el = function (tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "on") for (const [ev, f] of Object.entries(v)) e.addEventListener(ev, f);
      else if (v !== null && v !== undefined && v !== false) e.setAttribute(k, v === true ? "" : v);
    }
    for (const k of kids) if (k !== null && k !== undefined) e.append(k);
    return e;
  };
  JX.esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  JX.select = function (id, options, value, onchange) {
    const s = JX.el("select", { id, on: { change: () => onchange(s.value) } });
    for (const [v, label] of options) s.append(JX.el("option", { value: v }, label));
    s.value = String(value);
    return s;
  };

  /** An ARRAY of payload.py: base64 -> zlib inflate -> typed array. */
  class Tensor {
    constructor(a, bytes) {
      this.shape = a.shape; this.scale = a.scale; this.offset = a.offset;
      this.exact = a.dtype === "f4";
      this.data = this.exact ? new Float32Array(bytes.buffer, 0, bytes.length / 4) : bytes;
      this.strides = []; let s = 1;
      for (let d = a.shape.length - 1; d >= 0; d--) { this.strides[d] = s; s *= a.shape[d]; }
    }
    base(...idx) { let o = 0; idx.forEach((v, d) => { o += v * this.strides[d]; }); return o; }
    at(o) { return this.exact ? this.data[o] : this.data[o] * this.scale + this.offset; }
    /** The last axis at the given leading indices, as a Float32Array. */
    row(...idx) {
      const n = this.shape[this.shape.length - 1], o = this.base(...idx), out = new Float32Array(n);
      for (let k = 0; k < n; k++) out[k] = this.at(o + k);
      return out;
    }
  }
  JX.Tensor = Tensor;
  async function decodeArray(a) {
    const bin = atob(a.b64), n = bin.length, z = new Uint8Array(n);
    for (let i = 0; i < n; i++) z[i] = bin.charCodeAt(i);
    const stream = new Blob([z]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Tensor(a, new Uint8Array(await new Response(stream).arrayBuffer()));
  }
  /** Decode one example's arrays once (lazily: only examples someone looks at). */
  JX.loadExample = async function (ex) {
    if (ex._t) return ex;
    const t = { weights: {} };
    for (const [k, a] of Object.entries(ex.weights)) t.weights[k] = await decodeArray(a);
    if (ex.queries) { t.queries = await decodeArray(ex.queries); t.keys = await decodeArray(ex.keys); }
    ex.T = ex.tokens.length; ex._t = t;
    return ex;
  };
  /** [start, end) of sentence A / B / all of an example. */
  JX.span = function (ex, which) {
    const b = ex.sentence_b_start, T = ex.tokens.length;
    if (which === "A") return [0, b === null ? T : b];
    if (which === "B") return b === null ? [T, T] : [b, T];
    return [0, T];
  };

  /** Build the frame in `root` and draw `doc` (a payload.py document). */
  JX.mount = function (root, doc) {
    root.innerHTML = "";
    root.classList.add("jx");
    const state = { example: 0, kind: "attention", view: doc.views[0] };
    const ctx = { doc, state, root, ex: null, views: {} };
    const bar = JX.el("div", { class: "jx-bar" });
    const exSel = JX.select("example", doc.examples.map((e, i) => [i, e.label]), 0,
      (v) => setExample(+v));
    if (doc.examples.length < 2) exSel.disabled = true;
    const kindSel = JX.select("kind", Object.entries(JX.KIND_TITLES), "attention", (v) => {
      state.kind = v; redraw();
    });
    const tabs = JX.el("div", { class: "jx-tabs", role: "tablist" });
    for (const v of doc.views) {
      tabs.append(JX.el("button", { class: "tab", "data-view": v, on: { click: () => show(v) } },
        JX.VIEW_TITLES[v]));
    }
    bar.append(JX.el("label", {}, "Example ", exSel), JX.el("label", {}, "Weights ", kindSel), tabs);
    const err = JX.el("div", { class: "jx-error", id: "jx-error", hidden: true });
    root.append(bar, err);
    const panes = {};
    for (const v of doc.views) {
      panes[v] = JX.el("section", { id: `view-${v}`, class: "jx-pane", hidden: true });
      root.append(panes[v]);
    }
    const dirty = new Set(doc.views);
    ctx.show = show;
    function fail(e) { err.hidden = false; err.textContent = `Error: ${e && e.message ? e.message : e}`; root.dataset.state = "error"; }
    function redraw() {
      doc.views.forEach((v) => dirty.add(v));
      drawActive();
    }
    function drawActive() {
      const v = state.view;
      try {
        if (!ctx.views[v]) { ctx.views[v] = JX.views[v](ctx); panes[v].append(ctx.views[v].el); }
        if (dirty.has(v)) { dirty.delete(v); ctx.views[v].render(); }
        root.dataset.rendered = String(+(root.dataset.rendered || 0) + 1);
      } catch (e) { fail(e); throw e; }
    }
    function show(v) {
      state.view = v;
      for (const [name, p] of Object.entries(panes)) p.hidden = name !== v;
      tabs.querySelectorAll(".tab").forEach((b) => b.classList.toggle("on", b.dataset.view === v));
      root.dataset.view = v;
      drawActive();
    }
    async function setExample(i) {
      root.dataset.state = "loading";
      try {
        ctx.ex = await JX.loadExample(doc.examples[i]);
        state.example = i;
        const hasNorm = !!ctx.ex._t.weights.norm;
        kindSel.querySelector('option[value="norm"]').disabled = !hasNorm;
        if (!hasNorm && state.kind === "norm") { state.kind = "attention"; kindSel.value = "attention"; }
        exSel.value = String(i);
        root.dataset.example = String(i);
        for (const v of Object.values(ctx.views)) if (v.reset) v.reset();
        redraw();
        root.dataset.state = "ready";
      } catch (e) { fail(e); }
    }
    ctx.ready = setExample(0).then(() => show(state.view));
    return ctx;
  };
})();
