/* Stats view: layer x head heatmaps of Clark et al.'s head statistics, the
 * Kovaleva et al. class of each map and Vig's rule-detected patterns, all
 * computed in Python by jaxattn.analysis (stats.py) for the selected weight
 * kind. Each statistic has its own colour scale, from min(0, its minimum) to
 * its maximum over the heads, stated by a colour bar under its map (JX.colorBar
 * of model.js). DOM hooks: rect[data-stat][data-layer][data-head][data-v],
 * figure.sv-fig[data-stat] .jx-cbar[data-min][data-max], #sv-vig-legend.
 * A decoder's (doc.causal) are the decoder statistics, without classes or patterns.
 * A long example's statistics are along the text instead (segments.js draws them). */
"use strict";
(function () {
  const JX = window.JaxattnViews;
  const C = 14;
  const CLASS_COLORS = ["#1f77b4", "#2ca02c", "#17becf", "#9467bd", "#bbbbbb"];
  const NS = "http://www.w3.org/2000/svg";
  function heat(name, ex, value, fill, title, bar) {
    const L = ex.layers.length, H = ex.heads.length, lab = 28;
    let s = "";
    ex.heads.forEach((h, hi) => { s += `<text x="${lab + hi * C + C / 2}" y="10" text-anchor="middle" class="ax">${h}</text>`; });
    ex.layers.forEach((l, li) => {
      s += `<text x="${lab - 4}" y="${14 + li * C + C - 3}" text-anchor="end" class="ax">L${l}</text>`;
      for (let hi = 0; hi < H; hi++) {
        const v = value(li, hi);
        s += `<rect data-stat="${name}" data-layer="${li}" data-head="${hi}" data-v="${v}" x="${lab + hi * C}" y="${14 + li * C}" width="${C - 1}" height="${C - 1}" fill="${fill(v)}"><title>layer ${l}, head ${ex.heads[hi]}: ${JX.esc(title(v))}</title></rect>`;
      }
    });
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("width", lab + H * C + 2); svg.setAttribute("height", 16 + L * C);
    svg.innerHTML = s;
    return JX.el("figure", { class: "sv-fig", "data-stat": name }, JX.el("figcaption", {}, name), svg,
      bar ? JX.el("div", {}, bar) : null);
  }
  JX.views.stats = function (ctx) {
    const el = JX.el("div", { class: "sv" });
    function render() {
      el.innerHTML = "";
      const ex = ctx.ex, doc = ex.stats, kind = ctx.state.kind;
      if (doc && doc.format === "jaxattn.views.segments/1") { JX.drawSegments(el, doc, ex.tokens, kind); return; }
      const k = doc && doc.kinds[kind];
      if (!k) { el.append(JX.el("div", { class: "info" }, `No statistics for ${kind} weights in this file.`)); return; }
      el.append(JX.el("div", { class: "info", id: "sv-info" }, `${JX.KIND_TITLES[kind]}, this example (rows layers, columns heads). ` +
        (doc.causal
          ? "Decoder head statistics, as jaxattn analyze's \"Decoder heads\" (darker = larger, scaled per statistic: its colour bar gives the range), each a mean over query rows 1 .. T-1: the weight on the first token (the sink), the previous token, itself, punctuation, the row entropy over the keys it sees; induction: on the tokens that followed earlier occurrences of its token, duplicate: on those occurrences (n/a: no repeated token). Kovaleva's classes and Vig's patterns read a bidirectional map and [CLS]/[SEP]: not shown for a decoder."
          : "Head statistics after Clark et al. 2019 (darker = larger, scaled per statistic: its colour bar gives the range); classes after Kovaleva et al. 2019 and patterns after Vig 2019, by the rules of jaxattn.analysis.patterns.")));
      const box = JX.el("div", { class: "sv-box" });
      for (const name of doc.stats) {
        const g = k.head_stats[name];
        let lo = 0, hi = 0;
        g.forEach((r) => r.forEach((v) => { if (v !== null) { lo = Math.min(lo, v); hi = Math.max(hi, v); } }));
        const a = (v) => (hi > lo ? ((v - lo) / (hi - lo)).toFixed(3) : 0);
        box.append(heat(name, ex, (l, h) => g[l][h], (v) => (v === null ? "#eee" : `rgba(31,119,180,${a(v)})`),
          (v) => (v === null ? "n/a" : v.toFixed(4)), JX.colorBar(`sv-cbar-${name}`, ["#fff", hi > lo ? "rgb(31,119,180)" : "#fff"], lo, hi, null,
            Math.max(40, Math.min(96, ex.heads.length * C - 40)))));
      }
      el.append(JX.el("h3", {}, doc.causal ? "Decoder head statistics" : "Head statistics"), box);
      if (!doc.classes.length) return;  // a decoder's (stats.py)
      const cls = JX.el("div", { class: "sv-box" });
      cls.append(heat("kovaleva", ex, (l, h) => k.kovaleva[l][h], (v) => CLASS_COLORS[v % CLASS_COLORS.length], (v) => doc.classes[v]));
      const legend = JX.el("div", { class: "legend" });
      doc.classes.forEach((c, i) => legend.append(JX.el("span", {}, JX.el("i", { style: `background:${CLASS_COLORS[i]}` }), c)));
      cls.append(legend);
      el.append(JX.el("h3", {}, "Kovaleva classes"), cls);
      const pats = JX.el("div", { class: "sv-box" });
      for (const name of doc.patterns) {
        pats.append(heat(name, ex, (l, h) => (k.vig[name][l][h] ? 1 : 0), (v) => (v ? "#d62728" : "#f3f3f3"), (v) => (v ? "yes" : "no")));
      }
      pats.append(JX.el("div", { class: "legend", id: "sv-vig-legend" },
        JX.el("span", {}, JX.el("i", { style: "background:#d62728" }), "pattern found"),
        JX.el("span", {}, JX.el("i", { style: "background:#f3f3f3;outline:1px solid #ddd" }), "not found")));
      el.append(JX.el("h3", {}, "Vig patterns"), pats);
    }
    return { el, render };
  };
})();
