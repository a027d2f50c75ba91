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

  /** An ARRAY of payload.py (the web viewer's): base64 -> zlib inflate -> typed array. */
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
    return new Tensor(a, await inflate(z, "deflate"));
  }
  const inflate = async (bytes, format) => new Uint8Array(await new Response(
    new Blob([bytes]).stream().pipeThrough(new DecompressionStream(format))).arrayBuffer());

  /* The HTML page's packed data (page.py, payload.pack_page): a JSON header and
   * 13 bits per two characters of ALPHABET, deflate-raw sections per example. */
  const ALPHABET = [...Array(94)].map((_, i) => String.fromCharCode(33 + i)).filter((c) => !"<>&".includes(c));
  const INDEX = new Int32Array(128);
  ALPHABET.forEach((c, i) => { INDEX[c.charCodeAt(0)] = i; });
  /** Characters [a, b) of `text` -> its first `n` bytes. */
  JX.textBytes = function (text, a, b, n) {
    const out = new Uint8Array(n);
    let acc = 0, bits = 0, o = 0;
    for (let i = a; i < b && o < n; i += 2) {
      acc = (acc << 13) | (INDEX[text.charCodeAt(i)] * 91 + INDEX[text.charCodeAt(i + 1)]); bits += 13;
      while (bits >= 8 && o < n) { bits -= 8; out[o++] = (acc >>> bits) & 255; }
      acc &= (1 << bits) - 1;
    }
    return out;
  };
  /** The header's examples with their tokens and a reference to their section (decoded lazily). */
  JX.unpack = function (header, text) {
    const examples = header.examples.map((e) => ({
      label: e.label, tokens: e.tokens.map((i) => header.tokens[i]), sentence_b_start: e.sentence_b_start,
      generated_start: e.generated_start ?? null,
      layers: e.layers, heads: e.heads, causal: !!e.causal, kv_heads: e.kv_heads || null,
      kv_groups: e.kv_groups || null,
      _packed: { arrays: e.arrays, section: e.section, text },
    }));
    return { format: header.format, views: header.views, examples, start: header.start };
  };
  const f16 = (h) => {
    const e = (h >> 10) & 31, m = h & 1023, s = h & 0x8000 ? -1 : 1;
    if (e === 31) return m ? NaN : s * Infinity;
    return e === 0 ? s * m * 2 ** -24 : s * (1 + m / 1024) * 2 ** (e - 15);
  };
  /** Swap the last two axes of `src` (shape [..., A, B] -> [..., B, A]) into a new array. */
  function swapLast(src, shape) {
    const A = shape[shape.length - 1], B = shape[shape.length - 2], out = new src.constructor(src.length);
    for (let base = 0; base < src.length; base += A * B) {
      for (let a = 0; a < A; a++) for (let b = 0; b < B; b++) out[base + b * A + a] = src[base + a * B + b];
    }
    return out;
  }
  /** One array of a section as a Tensor (see payload.pack_array). */
  function packedTensor(d, raw) {
    const n = d.shape.reduce((x, y) => x * y, 1), at = raw.byteOffset + d.at;
    const f4 = (x) => new Tensor({ dtype: "f4", shape: d.shape, scale: 1, offset: 0 }, new Uint8Array(x.buffer));
    if (d.dtype === "i1") {
      const B = d.shape[d.shape.length - 1] * d.shape[d.shape.length - 2], heads = n / B, out = new Float32Array(n);
      const view = new DataView(raw.buffer, at, 2 * heads), ints = new Int8Array(raw.buffer, at + 2 * heads, n);
      for (let h = 0; h < heads; h++) {
        const s = f16(view.getUint16(2 * h, true));
        for (let k = h * B; k < (h + 1) * B; k++) out[k] = ints[k] * s;
      }
      return f4(out);
    }
    let data = d.dtype === "u1" ? raw.subarray(d.at, d.at + n) : new Float32Array(raw.buffer, at, n);
    data = d.keymajor ? swapLast(data, d.shape) : data.slice();
    if (d.dtype === "u1") return new Tensor({ dtype: "u1", shape: d.shape, scale: d.scale, offset: 0 }, data);
    return f4(data);
  }
  async function loadPacked(ex) {
    const p = ex._packed, [a, b, n] = p.section;
    const raw = await inflate(JX.textBytes(p.text, a, b, n), "deflate-raw");
    const t = { weights: {}, pooled: {}, first: {} };
    for (const [k, d] of Object.entries(p.arrays)) {
      if (k === "stats") ex.stats = JSON.parse(new TextDecoder().decode(raw.subarray(d.at, d.at + d.nbytes)));
      else if (k === "queries" || k === "keys") t[k] = packedTensor(d, raw);
      else if (k.startsWith("pooled:")) t.pooled[k.slice(7)] = packedTensor(d, raw);
      else if (k.startsWith("first:")) t.first[k.slice(6)] = packedTensor(d, raw);
      else t.weights[k] = Object.assign(packedTensor(d, raw), { band: d.band || null });
    }
    ex.long = Object.values(t.weights).some((w) => !!w.band);
    return t;
  }
  /** Decode one example's arrays once (lazily: only examples someone looks at). */
  JX.loadExample = async function (ex) {
    if (ex._t) return ex;
    if (ex._packed) { ex._t = await loadPacked(ex); ex.T = ex.tokens.length; return ex; }
    const t = { weights: {} };
    for (const [k, a] of Object.entries(ex.weights)) t.weights[k] = await decodeArray(a);
    if (ex.queries) { t.queries = await decodeArray(ex.queries); t.keys = await decodeArray(ex.keys); }
    ex.T = ex.tokens.length; ex._t = t;
    return ex;
  };
  /** [start, end) of sentence A / B / all of an example. */
  /** A long example (long_maps.py): its weights are bands, w(i, j) = 0 past |i - j| > BAND.
   * JX.weightAt(t, layer, head, T) -> (i, j) => weight, for full maps and bands alike. */
  JX.weightAt = function (t, layer, hi, T) {
    const d = t.data, sc = t.exact ? 1 : t.scale, off = t.exact ? 0 : t.offset;
    if (!t.band) { const base = t.base(layer, hi, 0, 0); return (i, j) => d[base + i * T + j] * sc + off; }
    const [first, last] = t.band, W = last - first + 1, base = t.base(layer, hi, 0, 0);
    return (i, j) => {
      const k = j - i - first;
      return k >= 0 && k < W ? d[base + i * W + k] * sc + off : 0;
    };
  };
  /** [lo, hi) of the head view's window of `radius` tokens either side of `center`, shifted
   * inside a T-token text (long_maps.token_window, the same rule). */
  JX.around = function (center, T, radius) {
    const n = Math.min(T, 2 * radius + 1), lo = Math.min(Math.max(0, center - radius), T - n);
    return [lo, lo + n];
  };
  /** [lo, hi) of the tokens `which` names: sentence "A" or "B" of a pair, a decoder's
   * "P"rompt or the tokens it "G"enerated after it (ex.generated_start); else all. */
  JX.span = function (ex, which) {
    const b = ex.sentence_b_start, T = ex.tokens.length, g = JX.generatedStart(ex);
    if (which === "A") return [0, b === null ? T : b];
    if (which === "B") return b === null ? [T, T] : [b, T];
    if (which === "P") return [0, g === null ? T : g];
    if (which === "G") return g === null ? [T, T] : [g, T];
    return [0, T];
  };
  /** The first generated token of a decoder's continuation (payload.py), or null. */
  JX.generatedStart = (ex) => (ex.generated_start === undefined ? null : ex.generated_start);
  /** What the views say about a continuation's tokens (the head and model views). */
  JX.GENERATED_NOTE = (g) => `Tokens from ${g} on were generated by the model after the prompt ` +
    "(orange, past the dashed line); each one's attention is what it had when it was generated.";

  /** A decoder's note (payload.is_causal): query i sees keys j <= i only. */
  JX.CAUSAL_NOTE = "Causal (decoder): each token attends to itself and earlier tokens (j ≤ i); nothing is drawn for j > i.";
  /** The note of a map that greys the masked future (the model and compare views). */
  JX.CAUSAL_MAP_NOTE = `${JX.CAUSAL_NOTE} The grey triangle is the masked future.`;
  // A decoder's masked future (j > i) on a map: this grey, opaque (the model view: a
  // weight's pixel is the head's colour at opacity = weight, so a zero weight and the
  // mask differ; the compare view: a zero weight is white, a zero difference white).
  JX.MASKED = [230, 230, 230, 255];
  /** The key/value head (an index into the keys' head axis) query head index `hi` reads. */
  JX.kvHead = (ex, hi) => (ex.kv_heads ? ex.kv_heads[hi] : hi);

  /** Indices of the tokens to label on an axis of `pitch` px per token, at least
   * `spacing` px apart: special tokens first ([SEP] stripes are the landmarks), then
   * the others in a regular stride (jaxattn.views.drawing.thin_ticks, the same rule). */
  JX.thinTicks = function (tokens, pitch, spacing = 11) {
    const T = tokens.length, special = (t) => "[<".includes(t[0]) && "]>".includes(t[t.length - 1]) && t.length > 2;
    const order = [...tokens.keys()].filter((i) => special(tokens[i]));
    const stride = pitch > 0 ? Math.max(1, Math.ceil(spacing / pitch)) : T;
    for (let i = 0; i < T; i += stride) if (!special(tokens[i])) order.push(i);
    const kept = [];
    for (const i of order) if (kept.every((k) => Math.abs(i - k) * pitch >= spacing)) kept.push(i);
    return kept.sort((a, b) => a - b);
  };

  /** Build the frame in `root` and draw `doc` (a payload.py document). */
  JX.mount = function (root, doc) {
    root.innerHTML = "";
    root.classList.add("jx");
    // where the page opens (page.py's header "start"; the web viewer's documents have none)
    const start = doc.start || { example: 0, token: 0 };
    const state = { example: start.example, kind: "attention", view: doc.views[0] };
    const ctx = { doc, state, root, ex: null, views: {} };
    const bar = JX.el("div", { class: "jx-bar" });
    const exSel = JX.select("example", doc.examples.map((e, i) => [i, e.label]), start.example,
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
    ctx.ready = setExample(start.example).then(() => show(state.view));
    return ctx;
  };
})();
