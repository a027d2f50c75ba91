/* Neuron view (after Vig's BertViz): for one layer, head and query token i, the
 * query vector q_i, then for each key token j the key vector k_j, the
 * elementwise product q_i × k_j, the dot product q_i · k_j and
 * softmax_j(q_i · k_j / sqrt(K)). Positive values blue, negative orange, the
 * colour's strength |v| / max |v| of its column group. Rows are virtualised:
 * only those in the scroll window exist in the DOM. DOM hooks:
 * .cell[data-kind=query|key|qk|dot|softmax][data-j][data-k][data-v]. */
"use strict";
(function () {
  const JX = window.JaxattnViews;
  const RH = 18, OVERSCAN = 6;
  function color(v, max) {
    const a = max > 0 ? Math.min(1, Math.abs(v) / max) : 0;
    return v >= 0 ? `rgba(31,119,180,${a.toFixed(3)})` : `rgba(255,127,14,${a.toFixed(3)})`;
  }
  JX.views.neuron = function (ctx) {
    const st = { layer: 0, head: 0, token: 0 };
    const el = JX.el("div", { class: "nv" });
    const controls = JX.el("div", { class: "jx-controls" });
    const qrow = JX.el("div", { class: "nv-q", id: "nv-query" });
    const header = JX.el("div", { class: "nv-row nv-header" });
    const rowsBox = JX.el("div", { class: "nv-rows", id: "nv-rows" });
    const spacer = JX.el("div", { class: "nv-spacer" });
    rowsBox.append(spacer);
    const msg = JX.el("div", { class: "info", id: "nv-info" });
    el.append(controls, msg, qrow, header, rowsBox);
    let cur = null;
    rowsBox.addEventListener("scroll", () => requestAnimationFrame(drawRows));

    function compute() {
      const ex = ctx.ex, T = ex.T, q = ex._t.queries, k = ex._t.keys, K = q.shape[3];
      const qi = q.row(st.layer, st.head, st.token);
      const keys = [], prods = [], dots = new Float64Array(T);
      let maxV = 0, maxP = 0, maxD = 0;
      for (let c = 0; c < K; c++) maxV = Math.max(maxV, Math.abs(qi[c]));
      for (let j = 0; j < T; j++) {
        const kj = k.row(st.layer, st.head, j), p = new Float64Array(K);
        let s = 0;
        for (let c = 0; c < K; c++) {
          p[c] = qi[c] * kj[c]; s += p[c];
          maxV = Math.max(maxV, Math.abs(kj[c])); maxP = Math.max(maxP, Math.abs(p[c]));
        }
        keys.push(kj); prods.push(p); dots[j] = s; maxD = Math.max(maxD, Math.abs(s));
      }
      const scale = 1 / Math.sqrt(K), sm = new Float64Array(T);
      let m = -Infinity, z = 0;
      for (let j = 0; j < T; j++) m = Math.max(m, dots[j] * scale);
      for (let j = 0; j < T; j++) { sm[j] = Math.exp(dots[j] * scale - m); z += sm[j]; }
      for (let j = 0; j < T; j++) sm[j] /= z;
      cur = { K, T, qi, keys, prods, dots, sm, maxV, maxP, maxD };
    }
    const cells = (kind, j, vec, max) => Array.from(vec, (v, c) =>
      `<span class="cell" data-kind="${kind}" data-j="${j}" data-k="${c}" data-v="${v}" title="${v.toPrecision(4)}" style="background:${color(v, max)}"></span>`).join("");
    function drawRows() {
      if (!cur) return;
      const { T } = cur, top = rowsBox.scrollTop, h = rowsBox.clientHeight || 400;
      const lo = Math.max(0, Math.floor(top / RH) - OVERSCAN), hi = Math.min(T, Math.ceil((top + h) / RH) + OVERSCAN);
      if (spacer.dataset.lo === String(lo) && spacer.dataset.hi === String(hi) && spacer.dataset.key === key()) return;
      spacer.dataset.lo = lo; spacer.dataset.hi = hi; spacer.dataset.key = key();
      let s = "";
      for (let j = lo; j < hi; j++) {
        const d = cur.dots[j], p = cur.sm[j];
        s += `<div class="nv-row${j === st.token ? " self" : ""}" data-j="${j}" style="top:${j * RH}px">` +
          `<span class="nv-tok" data-j="${j}" title="click: use as the query">${JX.esc(ctx.ex.tokens[j])}</span>` +
          `<span class="grp">${cells("key", j, cur.keys[j], cur.maxV)}</span><span class="grp">${cells("qk", j, cur.prods[j], cur.maxP)}</span>` +
          `<span class="grp"><span class="cell wide" data-kind="dot" data-j="${j}" data-v="${d}" style="background:${color(d, cur.maxD)}">${d.toFixed(2)}</span></span>` +
          `<span class="grp"><span class="cell wide" data-kind="softmax" data-j="${j}" data-v="${p}" style="background:${color(p, 1)}">${p.toFixed(3)}</span></span></div>`;
      }
      spacer.innerHTML = s;
    }
    const key = () => `${ctx.ex.label}|${st.layer}|${st.head}|${st.token}`;
    spacer.addEventListener("click", (e) => {
      const t = e.target.closest(".nv-tok");
      if (t) { st.token = +t.dataset.j; render(); }
    });
    function render() {
      const ex = ctx.ex;
      controls.innerHTML = ""; qrow.innerHTML = ""; spacer.innerHTML = ""; header.innerHTML = "";
      if (!ex._t.queries) {
        cur = null; spacer.style.height = "0px";
        msg.textContent = "The neuron view needs the queries and keys: capture with what=(..., 'queries', 'keys').";
        return;
      }
      st.layer = Math.min(st.layer, ex.layers.length - 1); st.head = Math.min(st.head, ex.heads.length - 1);
      st.token = Math.min(st.token, ex.T - 1);
      controls.append(
        JX.el("label", {}, "Layer ", JX.select("nv-layer", ex.layers.map((l, i) => [i, String(l)]), st.layer, (v) => { st.layer = +v; render(); })),
        JX.el("label", {}, "Head ", JX.select("nv-head", ex.heads.map((h, i) => [i, String(h)]), st.head, (v) => { st.head = +v; render(); })),
        JX.el("label", {}, "Query token ", JX.select("nv-token", ex.tokens.map((t, i) => [i, `${i}: ${t}`]), st.token, (v) => { st.token = +v; render(); })));
      compute();
      msg.textContent = `Layer ${ex.layers[st.layer]}, head ${ex.heads[st.head]}, query "${ex.tokens[st.token]}" (${st.token}); K = ${cur.K}. Blue positive, orange negative.`;
      qrow.innerHTML = `<span class="nv-tok">q: ${JX.esc(ex.tokens[st.token])}</span><span class="grp">${cells("query", st.token, cur.qi, cur.maxV)}</span>`;
      const w = cur.K * 9;
      header.innerHTML = `<span class="nv-tok">key token</span><span class="grp" style="width:${w}px">k</span><span class="grp" style="width:${w}px">q × k</span><span class="grp wide">q · k</span><span class="grp wide">softmax</span>`;
      spacer.style.height = `${cur.T * RH}px`;
      delete spacer.dataset.key;
      drawRows();
    }
    return { el, render, reset() { st.token = 0; } };
  };
})();
