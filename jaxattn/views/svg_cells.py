"""Static SVG of the neuron view and the stats view (see `jaxattn.views.svg`).

Both are laid out in bands like the other static views (title, colour bars or
legend, plot) with a colour bar stating the range of every scale: the neuron
view's q and k, q×k, q·k and softmax (blue positive, orange negative), and each
continuous head statistic of the stats view (its grid's own [min(0, min), max]).
"""

from __future__ import annotations

from html import escape

import numpy as np

from jaxattn.analysis.tokens import display_tokens
from jaxattn.capture import Capture
from jaxattn.views.drawing import (
    KIND_TITLES,
    colorbar,
    head_color,
    label_stride,
    scale_color,
    short,
    svg_doc,
    text_width,
    title,
    value_range,
)
from jaxattn.views.stats import stats_document

PAD = 8


def neuron_values(cap: Capture, layer: int, head: int, token: int) -> dict[str, np.ndarray]:
    """q [K], k [T, K], q×k [T, K], q·k [T] and softmax_j(q·k/√K) [T], in float64."""
    q = np.asarray(cap.array("queries")[layer, head, token], np.float64)
    k = np.asarray(cap.array("keys")[layer, head], np.float64)
    qk = q * k
    dot = qk.sum(-1)
    s = dot / np.sqrt(q.shape[-1])
    e = np.exp(s - s.max())
    return dict(query=q, key=k, qk=qk, dot=dot, softmax=e / e.sum())


def _bars(x0, y0, width, bars) -> tuple[str, float]:
    """Colour bars [(label, lo, hi)] in rows that wrap at `width`: (svg, height)."""
    out, x, y, row_h = [], x0, y0, 0.0
    for label, lo, hi in bars:
        bw = max(120.0, text_width(label, 11))
        if x > x0 and x + bw > x0 + width:
            x, y, row_h = x0, y + row_h + 8, 0.0
        body, w, h = colorbar(x, y, lo, hi, label, width=120)
        out.append(body)
        x, row_h = x + w + 24, max(row_h, h)
    return "\n".join(out), y + row_h - y0


def _sentences(x, top, rh, t, b, right) -> list[str]:
    """Sentence A / B of a pair: a letter and a bracket beside each span of rows and a
    dashed line across the plot at the boundary (<text class="sentence" data-sentence>,
    <line class="ab-boundary" data-row=b>)."""
    out = []
    for name, lo, hi in (("A", 0, b), ("B", b, t)):
        y0, y1 = top + lo * rh + 1, top + hi * rh - 3
        out.append(
            f'<line x1="{x + 12}" y1="{y0}" x2="{x + 12}" y2="{y1}" stroke="#999"/>'
            f'<text class="sentence" data-sentence="{name}" x="{x}" y="{(y0 + y1) / 2 + 4}" '
            f'font-weight="bold" fill="#777">{name}</text>'
        )
    yb = top + b * rh - 1
    out.append(
        f'<line class="ab-boundary" data-row="{b}" x1="{x}" y1="{yb}" x2="{right}" '
        f'y2="{yb}" stroke="#888" stroke-dasharray="4 3"/>'
    )
    return out


def neuron_svg(cap: Capture, *, layer=0, head=0, token=0) -> str:
    """The neuron view of (layer, head) axis indices and query position `token`.

    Left to right: every token as a query (the selected one highlighted) with its
    position index; lines from the selected query to every key, stroke-opacity =
    its softmax weight (the attention row, as the page's lines; all keys, where the
    page can filter by sentence); each key's index and token, k, the terms q×k, q·k
    and the softmax. For a pair, brackets name sentences A and B and a dashed line
    marks where B starts. <line class="nv-line" data-i data-j data-w>,
    <text class="idx" data-side="query|key" data-idx>.
    """
    v = neuron_values(cap, layer, head, token)
    n_t, n_k = v["key"].shape
    toks = [short(t, 16) for t in display_tokens(cap.tokens)]
    cw, rh, lw, iw = 9, 16, 90, 26
    lab = max(40, max(text_width(t) for t in toks) + 14)
    b = cap.sentence_b_start if cap.sentence_b_start and 0 < cap.sentence_b_start < n_t else None
    x_q = PAD + (20 if b else 0)  # the query column: token, then its index
    x_l = x_q + lab + iw  # the lines, then the keys: index, token, cells
    x_k = x_l + lw + iw + lab
    x_qk, x_dot = x_k + n_k * cw + 12, x_k + 2 * (n_k * cw + 12)
    x_sm = x_dot + 62
    width = x_sm + 64 - PAD
    query = f'query "{short(display_tokens(cap.tokens)[token], 24)}" ({token})'
    head_, tw, th = title(PAD, PAD, f"Layer {cap.layers[layer]}, head {cap.heads[head]}, {query}")
    width = max(width, tw)
    qk_range = value_range(np.concatenate([v["key"].ravel(), v["query"]]))
    scales = {
        "q, k": qk_range,
        "q × k": value_range(v["qk"]),
        "q · k": value_range(v["dot"]),
        "softmax": value_range(v["softmax"]),
    }
    names = {"softmax": "softmax (lines: opacity = weight)"}
    bars, bh = _bars(PAD, PAD + th + 8, width, [(names.get(k, k), *r) for k, r in scales.items()])
    color = {k: (lambda x, r=r: scale_color(x, *r)) for k, r in scales.items()}
    q_y = PAD + th + 8 + bh + 12
    top = q_y + rh + 24
    y = lambda r: top + r * rh + (rh - 2) / 2  # noqa: E731
    line_color = head_color(cap.heads[head])
    out = [
        head_,
        bars,
        '<g class="plot">',  # the selected query's row, then the q row
        f'<rect x="{x_q - 2}" y="{top + token * rh - 1}" width="{lab + iw}" height="{rh}" '
        f'fill="#eef4fb"/><text x="{x_k - 6}" y="{q_y + 11}" text-anchor="end">q</text>',
    ]
    for c in range(n_k):
        out.append(
            f'<rect x="{x_k + c * cw}" y="{q_y}" width="{cw - 1}" height="{rh - 2}" '
            f'fill="{color["q, k"](v["query"][c])}"/>'
        )
    for x, name, anchor in (
        (x_q + lab + iw - 4, "query", "end"),
        (x_l + lw, "key", "start"),
        (x_k, "k", "start"),
        (x_qk, "q × k", "start"),
        (x_dot, "q · k", "start"),
        (x_sm, "softmax", "start"),
    ):
        out.append(
            f'<text x="{x}" y="{top - 4}" font-weight="bold" fill="#555" '
            f'text-anchor="{anchor}">{name}</text>'
        )
    if b:
        out += _sentences(PAD, top, rh, n_t, b, x_sm + 54)
    for j in range(n_t):
        ry, w = top + j * rh, v["softmax"][j]
        weight = ' font-weight="bold"' if j == token else ""
        out.append(
            f'<line class="nv-line" data-i="{token}" data-j="{j}" data-w="{w:.4f}" '
            f'x1="{x_l + 2}" y1="{y(token)}" x2="{x_l + lw - 2}" y2="{y(j)}" '
            f'stroke="{line_color}" stroke-width="2" stroke-opacity="{w:.4f}"/>'
        )
        for side, xi, xt, anchor in (
            ("query", x_q + lab + iw - 4, x_q + lab - 2, "end"),
            ("key", x_l + lw + 4, x_l + lw + iw, "start"),
        ):
            out.append(
                f'<text class="idx" data-side="{side}" data-idx="{j}" x="{xi}" '
                f'y="{ry + 11}" text-anchor="{anchor}" font-size="10" fill="#999">{j}'
                f'</text><text class="tok" data-side="{side}" x="{xt}" y="{ry + 11}" '
                f'text-anchor="{anchor}"{weight}>{escape(toks[j])}</text>'
            )
        for c in range(n_k):
            out.append(
                f'<rect x="{x_k + c * cw}" y="{ry}" width="{cw - 1}" '
                f'height="{rh - 2}" fill="{color["q, k"](v["key"][j, c])}"/>'
                f'<rect x="{x_qk + c * cw}" y="{ry}" width="{cw - 1}" height="{rh - 2}" '
                f'fill="{color["q × k"](v["qk"][j, c])}"/>'
            )
        for x, val, name, f in (
            (x_dot, v["dot"][j], "q · k", ".2f"),
            (x_sm, v["softmax"][j], "softmax", ".3f"),
        ):
            out.append(
                f'<rect x="{x}" y="{ry}" width="54" height="{rh - 2}" '
                f'fill="{color[name](val)}"/><text x="{x + 52}" y="{ry + 11}" '
                f'text-anchor="end" font-size="10">{val:{f}}</text>'
            )
    out.append("</g>")
    return svg_doc(width + 2 * PAD, top + n_t * rh + PAD, "\n".join(out) + "\n")


def _grid(x0, y0, name, layers, heads, values, fill, cell, bar) -> tuple[str, float, float]:
    """One layer x head grid (<g class="plot">) with its name, thinned labels and, for
    bar=(lo, hi), its colour bar underneath (a <g class="colorbar"> beside it)."""
    lab = max(text_width(f"L{v}", 9) for v in layers) + 6
    out = [
        '<g class="plot">',
        f'<text x="{x0}" y="{y0 + 10}" font-weight="bold">{escape(name)}</text>',
    ]
    hk = label_stride(len(heads), cell, max(text_width(str(h), 9) for h in heads))
    for hi, h in list(enumerate(heads))[::hk]:
        out.append(
            f'<text x="{x0 + lab + hi * cell + cell / 2}" y="{y0 + 24}" font-size="9" '
            f'text-anchor="middle" fill="#666">{h}</text>'
        )
    lk = label_stride(len(layers), cell, 9)
    for li, layer in enumerate(layers):
        y = y0 + 28 + li * cell
        if li % lk == 0:
            out.append(
                f'<text x="{x0 + lab - 4}" y="{y + cell / 2 + 3}" font-size="9" '
                f'text-anchor="end" fill="#666">L{layer}</text>'
            )
        for hi in range(len(heads)):
            out.append(
                f'<rect x="{x0 + lab + hi * cell}" y="{y}" width="{cell - 1}" '
                f'height="{cell - 1}" fill="{fill(values[li][hi])}"/>'
            )
    out.append("</g>")
    gw, gh = max(lab + len(heads) * cell, text_width(name)), 28 + len(layers) * cell
    if bar:
        body, bw, bh = colorbar(x0, y0 + gh + 6, *bar, "", width=max(100, gw - 10))
        out.append(body)
        gw, gh = max(gw, bw), gh + 6 + bh
    return "\n".join(out), gw + 20, gh + 14


def stats_svg(cap: Capture, *, kind="attention") -> str:
    """The stats view: head statistics, Kovaleva classes and Vig patterns, one grid each."""
    doc = stats_document(cap)
    if kind not in doc["kinds"]:
        raise ValueError(
            "the capture has no 'alpha_fx_norm' for kind='norm': capture it with "
            "what=(..., 'alpha_fx_norm') (jaxattn view captures it)"
        )
    k = doc["kinds"][kind]
    colors = ("#1f77b4", "#2ca02c", "#17becf", "#9467bd", "#bbbbbb")
    cell = int(np.clip(336 // max(len(cap.layers), len(cap.heads)), 6, 14))
    grids = []
    for name in doc["stats"]:
        g = k["head_stats"][name]
        lo, hi = value_range(g)
        fill = lambda v, lo=lo, hi=hi: "#eee" if v is None else scale_color(v, lo, hi)  # noqa: E731
        grids.append((name, g, fill, (lo, hi)))
    grids.append(("Kovaleva class", k["kovaleva"], lambda v: colors[v % len(colors)], None))
    for name in doc["patterns"]:
        grids.append((name, k["vig"][name], lambda v: "#d62728" if v else "#f3f3f3", None))
    head_, tw, th = title(PAD, PAD, f"Head statistics: {KIND_TITLES[kind]}")
    out = [head_]
    max_w = 980.0
    x, y, row_h, width = PAD, PAD + th + 8, 0.0, tw
    for name, values, fill, bar in grids:
        body, gw, gh = _grid(x, y, name, cap.layers, cap.heads, values, fill, cell, bar)
        if x > PAD and x + gw > PAD + max_w:  # wrap to the next row of grids
            x, y, row_h = PAD, y + row_h, 0.0
            body, gw, gh = _grid(x, y, name, cap.layers, cap.heads, values, fill, cell, bar)
        out.append(body)
        x += gw
        row_h, width = max(row_h, gh), max(width, x - PAD)
    legend_y = y + row_h + 4
    items = [(colors[c], name) for c, name in enumerate(doc["classes"])]
    items.append(("#d62728", "pattern present"))
    out.append('<g class="legend">')
    lx, ly = PAD, legend_y
    for color, name in items:
        iw = 20 + text_width(name) + 16
        if lx > PAD and lx + iw > PAD + max(width, 660):
            lx, ly = PAD, ly + 18
        out.append(
            f'<rect x="{lx}" y="{ly}" width="12" height="12" fill="{color}"/>'
            f'<text x="{lx + 16}" y="{ly + 10}">{escape(name)}</text>'
        )
        lx += iw
    out.append("</g>")
    return svg_doc(max(width, 660) + 2 * PAD, ly + 12 + PAD, "\n".join(out) + "\n")
