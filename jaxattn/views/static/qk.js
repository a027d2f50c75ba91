/* jaxattn global query-key map (`jaxattn view --global`): a grid of every head's PCA map
 * and one large scatter of the selected head (2D canvas, ImageData), hover shows the token
 * in its sentence, click opens that sentence's head view for the selected head.
 * Data: qk_map.py's header and deflate-raw sections, decoded with core.js's textBytes.
 * Coordinates come quantised with one scale for both axes (qk_map.quantise): mapping 0..65535
 * (thumbnails 0..255) onto the square the same way on x and y keeps each head's aspect. */
"use strict";
(function () {
  const JX = window.JaxattnViews;
  const QK = (window.JaxattnQK = {});
  const SIZE = 640, M = 10, THUMB = 64, R = 7;
  const Q_RGB = [31, 119, 180], K_RGB = [255, 127, 14];
  const CLASS_RGB = [[120, 120, 120], [44, 160, 44], [214, 39, 40]];
  const CLASS_NAMES = ["word", "punctuation", "special"];
  const NAMES = { pca: "PCA", tsne: "t-SNE", umap: "UMAP" };
  const COLOURS = [["qk", "query / key"], ["position", "position in sentence"],
    ["type", "token type"], ["sentence", "sentence"]];
  const inflate = async (bytes) => new Uint8Array(await new Response(new Blob([bytes]).stream()
    .pipeThrough(new DecompressionStream("deflate-raw"))).arrayBuffer());
  const ramp = (f) => [Math.round(68 + 185 * f), Math.round(1 + 230 * f), Math.round(84 - 47 * f)];
  function hue(s) {
    const h = (s * 137.508) % 360 / 60, x = 1 - Math.abs((h % 2) - 1), c = [0, 0, 0];
    const i = Math.floor(h), v = [[1, x, 0], [x, 1, 0], [0, 1, x], [0, x, 1], [x, 0, 1], [1, 0, x]][i % 6];
    for (let k = 0; k < 3; k++) c[k] = Math.round(40 + 170 * v[k]);
    return c;
  }

  QK.mount = async function (root, header, text) {
    root.classList.add("jx");
    root.dataset.state = "loading";
    const n = header.points, S = header.sentences, L = header.layers, H = header.heads;
    const cache = new Map();
    const section = (i) => {
      if (!cache.has(i)) { const [a, b, m] = header.sections[i]; cache.set(i, inflate(JX.textBytes(text, a, b, m))); }
      return cache.get(i);
    };
    // Drawn at once, before any section is inflated: the controls, the sampled line, the
    // grid's frame (where the eye lands first) and the large canvas saying it is loading.
    let ids, cls, sent, pos, order, ready = false;  // the points, once inflated
    const layouts = Object.keys(header.layouts);
    const state = { g: 0, layout: layouts[layouts.length - 1], colour: "qk", show: "both", hover: -1 };
    const s = header.sampled;
    const kept = s.tokens < s.of_tokens
      ? `sampled: kept ${s.tokens} of ${s.of_tokens} tokens (${s.sentences} of ${s.of_sentences} sentences, whole sentences drawn uniformly)`
      : `all ${s.tokens} tokens of ${s.sentences} sentences`;
    const redraw = () => { if (ready) draw(); };
    const layoutSel = JX.select("qk-layout", layouts.map((l) => [l, NAMES[l]]),
      state.layout, (v) => { state.layout = v; redraw(); });
    const colourSel = JX.select("qk-colour", COLOURS, "qk", (v) => { state.colour = v; redraw(); });
    const showSel = JX.select("qk-show", [["both", "queries and keys"], ["q", "queries"], ["k", "keys"]],
      "both", (v) => { state.show = v; redraw(); });
    const title = JX.el("b", { id: "qk-title" }, "Loading ...");
    const info = JX.el("div", { class: "info", id: "qk-info" });
    const legend = JX.el("div", { class: "info", id: "qk-legend" });
    const canvas = JX.el("canvas", { id: "qk-canvas", width: SIZE, height: SIZE,
      style: `width:${SIZE}px;height:${SIZE}px;border:1px solid #ccc;cursor:crosshair` });
    const tip = JX.el("div", { id: "qk-tip", class: "info", style: "min-height:2.8em;max-width:640px" });
    const panel = JX.el("div", { id: "qk-head", class: "mv-detail", hidden: true });
    const grid = JX.el("div", { id: "qk-grid", class: "mv-grid",
      style: `grid-template-columns: 28px repeat(${H.length}, ${THUMB + 2}px)` });
    const loading = root.querySelector("#qk-loading") ||  // the page's own notice (qk_page.py)
      JX.el("div", { class: "qk-loading", id: "qk-loading", role: "status" }, "Loading the maps ...");
    root.append(
      JX.el("div", { class: "jx-bar" }, title, JX.el("label", {}, "Layout ", layoutSel),
        JX.el("label", {}, "Colour by ", colourSel), JX.el("label", {}, "Show ", showSel)),
      JX.el("div", { class: "info", id: "qk-sampled" }, kept), info, loading,
      JX.el("div", { class: "mv-wrap" }, grid, JX.el("div", {}, canvas, legend, tip), panel));
    const thumbCanvases = frame();
    const ctx = canvas.getContext("2d");
    ctx.fillStyle = "#f6f6f6"; ctx.fillRect(0, 0, SIZE, SIZE);
    ctx.fillStyle = "#777"; ctx.font = "14px system-ui, sans-serif"; ctx.textAlign = "center";
    ctx.fillText("Loading the map ...", SIZE / 2, SIZE / 2);
    const image = ctx.createImageData(SIZE, SIZE);
    let xy = null, buckets = null;
    const sentRgb = S.map((_, i) => hue(i));

    async function load() {  // the points: token ids, classes, sentence and position of each
      const praw = await section(header.points_section);
      ids = new Uint32Array(praw.slice(0, 4 * n).buffer); cls = praw.subarray(4 * n, 5 * n);
      sent = new Uint32Array(n); pos = new Uint16Array(n);
      S.forEach(([start, T], s) => { for (let t = 0; t < T; t++) { sent[start + t] = s; pos[start + t] = t; } });
      order = new Uint32Array(2 * n).map((_, i) => i);
      for (let i = 2 * n - 1, r = 12345; i > 0; i--) {  // a fixed shuffle: queries and keys interleave
        r = (r * 1103515245 + 12345) >>> 0; const j = r % (i + 1), t = order[i]; order[i] = order[j]; order[j] = t;
      }
    }
    function select(g) {  // a thumbnail's click: its map, brought into view when out of it
      state.g = g;
      if (!ready) return;
      draw();
      const r = canvas.getBoundingClientRect();
      if (r.top >= window.innerHeight || r.bottom <= 0) canvas.scrollIntoView({ block: "nearest" });
    }

    function colour(i) {
      const j = i < n ? i : i - n;
      if (state.colour === "qk") return i < n ? Q_RGB : K_RGB;
      if (state.colour === "type") return CLASS_RGB[cls[j]];
      if (state.colour === "sentence") return sentRgb[sent[j]];
      return ramp(pos[j] / Math.max(1, S[sent[j]][1] - 1));
    }
    // a sentence's place in its INPUT (a store's record): "corpus.txt example 12"
    const where = (s) => `${header.inputs[S[s][4]]} example ${S[s][5]}`;
    const visible = (i) => state.show === "both" || (state.show === "q") === (i < n);
    const screen = (i) => [M + (xy[2 * i] / 65535) * (SIZE - 2 * M), SIZE - M - (xy[2 * i + 1] / 65535) * (SIZE - 2 * M)];

    async function draw() {
      const t0 = performance.now();
      const g = state.g, lay = header.layouts[state.layout];
      const raw = await section(lay.sections[g]);
      xy = new Uint16Array(raw.buffer, raw.byteOffset, 4 * n);
      const px = image.data;
      px.fill(255);
      buckets = new Map();
      const big = (state.show === "both" ? 2 * n : n) < 20000 ? 1 : 0;  // 3x3 dots when few
      for (const i of order) {
        if (!visible(i)) continue;
        const [x, y] = screen(i), c = colour(i), xi = Math.round(x), yi = Math.round(y);
        const key = (xi >> 3) * 4096 + (yi >> 3);
        if (!buckets.has(key)) buckets.set(key, []);
        buckets.get(key).push(i);
        for (let dy = -1; dy <= big; dy++) for (let dx = -1; dx <= big; dx++) {
          const o = 4 * ((yi + dy) * SIZE + xi + dx);
          for (let k = 0; k < 3; k++) px[o + k] = (px[o + k] * 3 + c[k] * 7) / 10;
        }
      }
      ctx.putImageData(image, 0, 0);
      const l = L[Math.floor(g / H.length)], h = H[g % H.length], ev = header.explained[g];
      title.textContent = `Layer ${l}, head ${h}`;
      info.textContent = `${NAMES[state.layout]} of the joint ` +
        `normalised query/key cloud (q·c and k/c moved onto one centroid, c giving them equal RMS norms); ` +
        `PCA axes explain ${(100 * ev[0]).toFixed(1)}% and ${(100 * ev[1]).toFixed(1)}% of its variance. ` +
        `Thumbnails: PCA. ${2 * n} points.`;
      legend.innerHTML = state.colour === "qk"
        ? `<span style="color:rgb(${Q_RGB})">■ queries</span> <span style="color:rgb(${K_RGB})">■ keys</span>`
        : state.colour === "type" ? CLASS_NAMES.map((c, k) => `<span style="color:rgb(${CLASS_RGB[k]})">■ ${c}</span>`).join(" ")
          : state.colour === "position" ? "position: first (dark) → last (yellow)" : "one hue per sentence";
      grid.querySelectorAll("canvas").forEach((c) => { c.style.borderColor = +c.dataset.g === g ? "#d62728" : ""; });
      root.dataset.drawMs = String(performance.now() - t0);
      root.dataset.g = String(g); root.dataset.layout = state.layout;
    }
    function nearest(x, y) {
      let best = -1, bd = R * R;
      if (!buckets) return best;
      const bx = Math.round(x) >> 3, by = Math.round(y) >> 3;
      for (let a = bx - 1; a <= bx + 1; a++) for (let b = by - 1; b <= by + 1; b++) {
        for (const i of buckets.get(a * 4096 + b) || []) {
          const [px, py] = screen(i), d = (px - x) ** 2 + (py - y) ** 2;
          if (d < bd) { bd = d; best = i; }
        }
      }
      return best;
    }
    function sentenceHtml(s, t) {
      const [start, T] = S[s];
      const words = [];
      for (let k = 0; k < T; k++) {
        const w = JX.esc(header.tokens[ids[start + k]]);
        words.push(k === t ? `<mark id="qk-token">${w}</mark>` : w);
      }
      return words.join(" ");
    }
    canvas.addEventListener("mousemove", (e) => {
      const r = canvas.getBoundingClientRect(), i = nearest(e.clientX - r.left, e.clientY - r.top);
      state.hover = i; root.dataset.hover = String(i);
      if (i < 0) { tip.innerHTML = ""; return; }
      const j = i < n ? i : i - n, s = sent[j];
      tip.innerHTML = `<b>${i < n ? "query" : "key"}</b> · ${JX.esc(where(s))}, position ${pos[j]} · ` +
        `${CLASS_NAMES[cls[j]]}<br>${sentenceHtml(s, pos[j])}`;
    });
    canvas.addEventListener("click", () => { if (state.hover >= 0) openHead(state.hover); });

    async function openHead(i) {
      const j = i < n ? i : i - n, s = sent[j], t = pos[j], [, T, index, sec] = S[s];
      const g = state.g, l = L[Math.floor(g / H.length)], h = H[g % H.length];
      panel.hidden = false;
      Object.assign(panel.dataset, { sentence: String(index), record: String(S[s][5]), layer: String(l),
        head: String(h), token: String(t) });
      const head = `<h3>${JX.esc(where(s))}: layer ${l}, head ${h}</h3>`;
      if (sec < 0) {
        panel.innerHTML = head + "<p>This sentence's attention is not in the page (it holds the attention " +
          `of ${header.with_attention} sampled sentences, up to --global-attention-mb, or none was captured).</p>`;
        return;
      }
      const a = await section(sec), base = g * T * T, rowH = 18, w = 300;
      const c = JX.headColor(h), tok = (k) => JX.esc(header.tokens[ids[S[s][0] + k]]);
      let svg = `<svg id="qk-hv" width="${w}" height="${T * rowH + 8}" font-size="12">`;
      for (let q = 0; q < T; q++) for (let k = 0; k < T; k++) {
        const v = a[base + q * T + k] / 255, on = i < n ? q === t : k === t;
        if (v > 0) svg += `<line x1="92" y1="${q * rowH + 12}" x2="208" y2="${k * rowH + 12}" stroke="${c}" ` +
          `stroke-opacity="${(on ? v : v * 0.15).toFixed(3)}" stroke-width="2" data-q="${q}" data-k="${k}"></line>`;
      }
      for (let k = 0; k < T; k++) {
        const b = k === t ? ' font-weight="bold"' : "";
        svg += `<text x="86" y="${k * rowH + 16}" text-anchor="end"${b}>${tok(k)}</text>` +
          `<text x="214" y="${k * rowH + 16}"${b}>${tok(k)}</text>`;
      }
      panel.innerHTML = head + `<div class="hv-legend">${i < n ? "query" : "key"} ${tok(t)} (position ${t}) ` +
        "highlighted; line opacity = attention weight</div>" + svg + "</svg>";
      panel.dataset.state = "ready";
    }

    function frame() {  // the grid's labels and blank thumbnails, before any data
      const out = [];
      grid.append(JX.el("div", {}));
      H.forEach((h) => grid.append(JX.el("div", { class: "mv-col" }, `H${h}`)));
      L.forEach((l, li) => {
        grid.append(JX.el("div", { class: "mv-row" }, `L${l}`));
        H.forEach((h, hi) => {
          const g = li * H.length + hi;
          const c = JX.el("canvas", { class: "thumb loading", width: THUMB, height: THUMB, "data-g": g,
            "data-layer": l, "data-head": h, title: `layer ${l}, head ${h}`, on: { click: () => select(g) } });
          grid.append(c);
          out.push(c);
        });
      });
      return out;
    }
    async function thumbs() {
      const raw = await section(header.thumbs.section), m = header.thumbs.count;
      thumbCanvases.forEach((c, g) => {
        const tc = c.getContext("2d"), im = tc.createImageData(THUMB, THUMB);
        for (let p = 0; p < 2 * m; p++) {
          const o = 2 * (g * 2 * m + p), x = Math.round(1 + raw[o] / 255 * (THUMB - 3));
          const y = Math.round(THUMB - 2 - raw[o + 1] / 255 * (THUMB - 3)), rgb = p < m ? Q_RGB : K_RGB, at = 4 * (y * THUMB + x);
          im.data[at] = rgb[0]; im.data[at + 1] = rgb[1]; im.data[at + 2] = rgb[2]; im.data[at + 3] = 255;
        }
        tc.putImageData(im, 0, 0);
        c.classList.remove("loading");
      });
    }
    try {
      await Promise.all([load(), thumbs()]);
      ready = true;
      await draw();
      QK.debug = { screen: (i) => screen(i), n, draw: async () => { await draw(); return +root.dataset.drawMs; },
        visible: () => order.filter((i) => visible(i)).length };
      loading.remove();
      root.dataset.state = "ready";
    } catch (e) {
      loading.remove();
      root.append(JX.el("div", { class: "jx-error", id: "jx-error" }, `Error: ${e && e.message ? e.message : e}`));
      root.dataset.state = "error";
      throw e;
    }
  };
})();
