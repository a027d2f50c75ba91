"""Static SVG of the stats view: one layer x head grid per head statistic and pattern.

A decoder's: its decoder statistics, no classes or patterns (`stats_document`).

The numbers are the HTML stats view's (`jaxattn.views.stats.stats_document`): a
grid per continuous head statistic, each with a colour bar of its own range
([min(0, min), max]), then Kovaleva et al.'s classes and Vig's patterns as
categorical grids with one legend. Laid out in bands like the other static views
(`jaxattn.views.svg`, which dispatches here from ``to_svg(cap, "stats")``).
"""

from __future__ import annotations

from html import escape

import numpy as np

from jaxattn.capture import Capture
from jaxattn.errors import UsageError
from jaxattn.views.drawing import (
    KIND_TITLES,
    PAD,
    SVG,
    colorbar,
    label_stride,
    scale_color,
    svg_doc,
    text_width,
    title,
    value_range,
)
from jaxattn.views.stats import stats_document


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


def stats_svg(cap: Capture, *, kind="attention") -> SVG:
    """The stats view: head statistics, Kovaleva classes and Vig patterns, one grid each."""
    doc = stats_document(cap)
    if kind not in doc["kinds"]:
        raise UsageError(
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
    if doc["classes"]:  # not a decoder's (`stats_document`)
        grids.append(("Kovaleva class", k["kovaleva"], lambda v: colors[v % len(colors)], None))
    for name in doc["patterns"]:
        grids.append((name, k["vig"][name], lambda v: "#d62728" if v else "#f3f3f3", None))
    what = "Decoder head statistics" if doc["causal"] else "Head statistics"
    head_, tw, th = title(PAD, PAD, f"{what}: {KIND_TITLES[kind]}")
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
    if doc["patterns"]:
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
