/* Neuron view (after Vig's BertViz): for one layer, head and query token i, the
 * query vector q_i, then for each key token j the key vector k_j, the
 * per-dimension terms q_i,d × k_j,d, their sum q_i · k_j and
 * softmax_j(q_i · k_j / sqrt(K)) (the attention row). Positive values blue,
 * negative orange, the colour's strength |v| / max |v| of its column group
 * over all keys (colour bars state each range). Left: the query tokens (click
 * one to select it), lines from the selected one to the keys, stroke-opacity =
 * its softmax weight (the attention), each token with its position index. A
 * sentence filter (pairs: all, A → A, A → B, B → A, B → B) limits the query
 * tokens to the first sentence named and the keys to the second; the softmax
 * stays the one over all keys. Rows are virtualised: only those in the scroll
 * window exist in the DOM. A grouped-query head (ex.kv_heads) reads its key/value
 * head's keys, and the info line names it as the model numbers it (ex.kv_groups,
 * #nv-group; a selection of heads keeps the numbers). A decoder's query i sees keys
 * j <= i only: the softmax is over those, later keys are greyed (.nv-row.masked), with
 * no line and "masked" for their softmax. A decoder's continuation (ex.generated_start)
 * shows its generated tokens in their own style (.nv-qtok.gen, .nv-row.gen), a dashed
 * rule above the first of them (.gen-start), and the info line says so (#nv-generated).
 * DOM hooks: #nv-group[data-kv], .nv-row.masked, #nv-filter, #nv-token,
 * .nv-qtok[data-i], .nv-row[data-j], .nv-idx, line.nv-line[data-i][data-j][data-w],
 * .cell[data-kind=query|key|qk|dot|softmax][data-j][data-k][data-v],
 * #nv-scale .jx-cbar[data-min][data-max]. */
"use strict";
(function () {
  const JX = window.JaxattnViews;
  const RH = 18, OVERSCAN = 6, QW = 130, LW = 90, IW = 26, TW = 116;
  const POS = "rgb(31,119,180)", NEG = "rgb(255,127,14)";
  const FILTERS = [["all", "all"], ["AA", "A → A"], ["AB", "A → B"], ["BA", "B → A"], ["BB", "B → B"]];
  const IDX = "display:inline-block;color:#999;font-size:10px;";
  function color(v, max) {
    const a = max > 0 ? Math.min(1, Math.abs(v) / max) : 0;
    return v >= 0 ? `rgba(31,119,180,${a.toFixed(3)})` : `rgba(255,127,14,${a.toFixed(3)})`;
  }
  const range = (lo, hi) => Array.from({ length: Math.max(0, hi - lo) }, (_, k) => lo + k);
  JX.views.neuron = function (ctx) {
    // The query token the page opens at (page.py's "start"), while its example is shown;
    // another example's, or any on a page without one (the live viewer's): a decoder's
    // last token (its first sees only itself), else 0, as views.causal.default_query.
    const first = (ex) => (ex && ex.causal ? ex.tokens.length - 1 : 0);
    const start = ctx.doc.start;
    const token = start && ctx.state.example === start.example ? start.token : first(ctx.ex);
    const st = { layer: 0, head: 0, token, filter: "all" };
    const el = JX.el("div", { class: "nv" });
    const controls = JX.el("div", { class: "jx-controls" });
    const scale = JX.el("div", { class: "info", id: "nv-scale" });
    const qrow = JX.el("div", { class: "nv-q", id: "nv-query" });
    const header = JX.el("div", { class: "nv-row nv-header" });
    const rowsBox = JX.el("div", { class: "nv-rows", id: "nv-rows" });
    const spacer = JX.el("div", { class: "nv-spacer" });
    rowsBox.append(spacer);
    const msg = JX.el("div", { class: "info", id: "nv-info" });
    el.append(controls, msg, scale, qrow, header, rowsBox);
    let cur = null;
    rowsBox.addEventListener("scroll", () => requestAnimationFrame(drawRows));

    function compute() {
      const ex = ctx.ex, T = ex.T, q = ex._t.queries, k = ex._t.keys, K = q.shape[3];
      const qi = q.row(st.layer, st.head, st.token), g = JX.kvHead(ex, st.head);
      const seen = ex.causal ? st.token + 1 : T;  // keys 0 .. seen - 1
      const keys = [], prods = [], dots = new Float64Array(T);
      let maxV = 0, maxP = 0, maxD = 0;
      for (let c = 0; c < K; c++) maxV = Math.max(maxV, Math.abs(qi[c]));
      for (let j = 0; j < T; j++) {
        const kj = k.row(st.layer, g, j), p = new Float64Array(K);
        let s = 0;
        for (let c = 0; c < K; c++) {
          p[c] = qi[c] * kj[c]; s += p[c];
          if (j < seen) { maxV = Math.max(maxV, Math.abs(kj[c])); maxP = Math.max(maxP, Math.abs(p[c])); }
        }
        keys.push(kj); prods.push(p); dots[j] = s;
        if (j < seen) maxD = Math.max(maxD, Math.abs(s));
      }
      const f = 1 / Math.sqrt(K), sm = new Float64Array(T);
      let m = -Infinity, z = 0;
      for (let j = 0; j < seen; j++) m = Math.max(m, dots[j] * f);
      for (let j = 0; j < seen; j++) { sm[j] = Math.exp(dots[j] * f - m); z += sm[j]; }
      for (let j = 0; j < seen; j++) sm[j] /= z;
      const sides = st.filter === "all" ? ["all", "all"] : [st.filter[0], st.filter[1]];
      const qs = range(...JX.span(ex, sides[0])), ks = range(...JX.span(ex, sides[1]));
      cur = { K, T, g, seen, qi, keys, prods, dots, sm, maxV, maxP, maxD, qs, ks, rq: qs.indexOf(st.token) };
    }
    const cells = (kind, j, vec, max, title) => Array.from(vec, (v, c) =>
      `<span class="cell" data-kind="${kind}" data-j="${j}" data-k="${c}" data-v="${v}" title="${title(v, c)}" style="background:${color(v, max)}"></span>`).join("");
    const num = (v) => v.toPrecision(4);
    /** " gen" for a generated token (" gen gen-start" for the first), else "". */
    function genClass(i) {
      const g = JX.generatedStart(ctx.ex);
      return g === null || i < g ? "" : i === g ? " gen gen-start" : " gen";
    }
    function keyRow(r, j) {
      const d = cur.dots[j], p = cur.sm[j], kj = cur.keys[j], qi = cur.qi;
      if (j >= cur.seen) {  // a decoder's later key: masked, nothing drawn
        return `<div class="nv-row masked${genClass(j)}" data-j="${j}" style="top:${r * RH}px;left:${QW + LW}px">` +
          `<span class="nv-idx" style="${IDX}width:${IW}px">${j}</span>` +
          `<span class="nv-tok" data-j="${j}" style="text-align:left;cursor:default">${JX.esc(ctx.ex.tokens[j])}</span>` +
          `<span class="nv-masked" title="query ${st.token} does not see key ${j} (causal)">masked: a later token</span></div>`;
      }
      return `<div class="nv-row${j === st.token ? " self" : ""}${genClass(j)}" data-j="${j}" style="top:${r * RH}px;left:${QW + LW}px">` +
        `<span class="nv-idx" style="${IDX}width:${IW}px">${j}</span>` +
        `<span class="nv-tok" data-j="${j}" style="text-align:left;cursor:default">${JX.esc(ctx.ex.tokens[j])}</span>` +
        `<span class="grp">${cells("key", j, kj, cur.maxV, (v, c) => `k[${c}] = ${num(v)}`)}</span>` +
        `<span class="grp">${cells("qk", j, cur.prods[j], cur.maxP, (v, c) => `dim ${c}: q ${num(qi[c])} × k ${num(kj[c])} = ${num(v)}`)}</span>` +
        `<span class="grp"><span class="cell wide" data-kind="dot" data-j="${j}" data-v="${d}" title="q · k = sum of the ${cur.K} terms" style="background:${color(d, cur.maxD)}">${d.toFixed(2)}</span></span>` +
        `<span class="grp"><span class="cell wide" data-kind="softmax" data-j="${j}" data-v="${p}" title="softmax(q · k / √${cur.K})" style="background:${color(p, 1)}">${p.toFixed(3)}</span></span></div>`;
    }
    function drawRows() {
      if (!cur) return;
      const { qs, ks } = cur, n = Math.max(qs.length, ks.length), top = rowsBox.scrollTop, h = rowsBox.clientHeight || 400;
      const lo = Math.max(0, Math.floor(top / RH) - OVERSCAN), hi = Math.min(n, Math.ceil((top + h) / RH) + OVERSCAN);
      if (spacer.dataset.lo === String(lo) && spacer.dataset.hi === String(hi) && spacer.dataset.key === key()) return;
      spacer.dataset.lo = lo; spacer.dataset.hi = hi; spacer.dataset.key = key();
      const ex = ctx.ex, yq = cur.rq * RH + RH / 2, col = JX.headColor(ex.heads[st.head]);
      let s = "", lines = "";
      for (let r = lo; r < hi; r++) {
        if (r < qs.length) {
          const i = qs[r], sel = i === st.token;
          s += `<div class="nv-qtok${genClass(i)}" data-i="${i}" title="click: use as the query" style="position:absolute;top:${r * RH}px;left:0;width:${QW - 4}px;height:${RH}px;` +
            `display:flex;justify-content:flex-end;align-items:center;gap:4px;cursor:pointer;white-space:nowrap${sel ? ";font-weight:bold;background:#eef4fb" : ""}">` +
            `<span style="overflow:hidden;text-overflow:ellipsis">${JX.esc(ex.tokens[i])}</span><span class="nv-idx" style="${IDX}">${i}</span></div>`;
        }
        if (r < ks.length) {
          const j = ks[r], w = cur.sm[j];
          s += keyRow(r, j);
          if (j < cur.seen) lines += `<line class="nv-line" data-i="${st.token}" data-j="${j}" data-w="${w}" x1="2" y1="${yq}" x2="${LW - 2}" y2="${r * RH + RH / 2}" ` +
            `stroke="${col}" stroke-width="2" stroke-opacity="${w}"><title>${JX.esc(ex.tokens[st.token])} (${st.token}) → ${JX.esc(ex.tokens[j])} (${j}): ${w.toFixed(4)}</title></line>`;
        }
      }
      const svg = `<svg class="nv-lines" width="${LW}" height="${n * RH}" style="position:absolute;top:0;left:${QW}px;overflow:visible">${lines}</svg>`;
      spacer.innerHTML = svg + s;
    }
    const key = () => `${ctx.ex.label}|${st.layer}|${st.head}|${st.token}|${st.filter}`;
    spacer.addEventListener("click", (e) => {
      const t = e.target.closest(".nv-qtok");
      if (t) { st.token = +t.dataset.i; render(); }
    });
    function scaleBars() {
      const div = [NEG, "#fff", POS];
      scale.innerHTML = "";
      scale.append("Colour scales: ", JX.colorBar("nv-cbar-kq", div, -cur.maxV, cur.maxV, "q, k"),
        JX.colorBar("nv-cbar-qk", div, -cur.maxP, cur.maxP, "q × k"),
        JX.colorBar("nv-cbar-dot", div, -cur.maxD, cur.maxD, "q · k"),
        JX.colorBar("nv-cbar-softmax", ["#fff", POS], 0, 1, "softmax (line opacity)"));
    }
    function render() {
      const ex = ctx.ex;
      controls.innerHTML = ""; qrow.innerHTML = ""; spacer.innerHTML = ""; header.innerHTML = ""; scale.innerHTML = "";
      if (!ex._t.queries) {
        cur = null; spacer.style.height = "0px";
        msg.textContent = "The neuron view needs the queries and keys: capture with what=(..., 'queries', 'keys').";
        return;
      }
      st.layer = Math.min(st.layer, ex.layers.length - 1); st.head = Math.min(st.head, ex.heads.length - 1);
      if (ex.sentence_b_start === null) st.filter = "all";
      const [q0, q1] = JX.span(ex, st.filter === "all" ? "all" : st.filter[0]);
      if (st.token < q0 || st.token >= q1) st.token = q0;
      controls.append(
        JX.el("label", {}, "Layer ", JX.select("nv-layer", ex.layers.map((l, i) => [i, String(l)]), st.layer, (v) => { st.layer = +v; render(); })),
        JX.el("label", {}, "Head ", JX.select("nv-head", ex.heads.map((h, i) => [i, String(h)]), st.head, (v) => { st.head = +v; render(); })));
      if (ex.sentence_b_start !== null) {
        controls.append(JX.el("label", { title: "query sentence → key sentence" }, "Sentences ",
          JX.select("nv-filter", FILTERS, st.filter, (v) => { st.filter = v; render(); })));
      }
      controls.append(JX.el("label", {}, "Query token ",
        JX.select("nv-token", range(q0, q1).map((i) => [i, `${i}: ${ex.tokens[i]}`]), st.token, (v) => { st.token = +v; render(); })));
      compute();
      let share = "";
      if (cur.ks.length < cur.T) {
        const w = cur.ks.reduce((a, j) => a + cur.sm[j], 0);
        share = ` Keys of sentence ${st.filter[1]} only: they hold ${(100 * w).toFixed(1)}% of this query's attention (the softmax is over all keys).`;
      }
      msg.textContent = `Layer ${ex.layers[st.layer]}, head ${ex.heads[st.head]}, query "${ex.tokens[st.token]}" (${st.token}); K = ${cur.K}. ` +
        `Blue positive, orange negative; hover a cell for its terms.${share}` +
        (ex.causal ? " Causal (decoder): the query sees itself and earlier keys; later keys are masked." : "");
      const gen = JX.generatedStart(ex);
      if (gen !== null && gen < ex.tokens.length) {
        msg.append(JX.el("div", { id: "nv-generated", "data-at": gen }, JX.GENERATED_NOTE(gen)));
      }
      const grp = ex.kv_groups;  // the model's key/value head numbers (payload.kv_groups)
      if (grp) {
        const kv = grp.heads[st.head];
        msg.append(JX.el("div", { id: "nv-group", "data-kv": kv },
          `Grouped-query attention: head ${ex.heads[st.head]} reads key/value head ${kv}` +
          `${grp.of ? ` of ${grp.of}` : ""} (heads ` +
          `${ex.heads.filter((_, h) => grp.heads[h] === kv).join(", ")} of those shown share its keys).`));
      }
      scaleBars();
      const pad = `<span style="display:inline-block;width:${QW + LW + IW}px"></span>`;
      qrow.innerHTML = `${pad}<span class="nv-tok">q: ${JX.esc(ex.tokens[st.token])} (${st.token})</span><span class="grp">` +
        `${cells("query", st.token, cur.qi, cur.maxV, (v, c) => `q[${c}] = ${num(v)}`)}</span>`;
      const w = cur.K * 9;
      header.innerHTML = `<span style="display:inline-block;width:${QW - 4}px;text-align:right">query</span><span style="display:inline-block;width:${LW + 4 + IW}px"></span>` +
        `<span class="nv-tok" style="width:${TW - 6}px;text-align:left">key token</span><span class="grp" style="width:${w}px">k</span>` +
        `<span class="grp" style="width:${w}px" title="the per-dimension terms q_d × k_d; their sum is q · k">q × k</span><span class="grp wide">q · k</span><span class="grp wide">softmax</span>`;
      spacer.style.height = `${Math.max(cur.qs.length, cur.ks.length) * RH}px`;
      const y = cur.rq * RH, h = rowsBox.clientHeight || 400;  // keep the query's row in view
      if (y < rowsBox.scrollTop || y + RH > rowsBox.scrollTop + h) rowsBox.scrollTop = Math.max(0, y - h / 2);
      delete spacer.dataset.key;
      drawRows();
    }
    return { el, render, reset() { st.token = first(ctx.ex); } };
  };
})();
