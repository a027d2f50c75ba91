"""Static SVG of a view, written from Python (no browser): vector output for papers.

    svg = to_svg(cap, "head", layer=2, heads=[0, 3])
    svg = to_svg(cap, "model", kind="norm")
    svg = to_svg(cap, "neuron", layer=2, head=3, token=5)
    svg = to_svg(cap, "stats")

The drawings follow the HTML views: head-view lines with stroke-opacity = weight
(each carrying data-i, data-j, data-head like the page's), model-view heatmaps
(embedded PNG images, one pixel per (query, key) cell), neuron-view cells
(positive blue, negative orange) and the stats view's layer x head grids.
"""

from __future__ import annotations

import base64
from html import escape

import numpy as np

from jaxattn.capture import Capture
from jaxattn.views import svg_cells
from jaxattn.views.drawing import KIND_TITLES, head_color, png_bytes, svg_doc
from jaxattn.views.payload import view_weights


def head_svg(cap, *, layer=0, heads=None, kind="attention", min_weight=0.0, max_lines=5000):
    """The head view of layer index `layer` (axis index into ``cap.layers``)."""
    w = view_weights(cap, kind)[layer]  # [H, T, T]
    hs = list(range(w.shape[0])) if heads is None else list(heads)
    rh, colw, gap, top = 18, 130, 220, 30
    t = len(cap.tokens)
    h_idx, i_idx, j_idx = np.nonzero(w[hs] > max(min_weight, 0.0))
    vals = w[hs][h_idx, i_idx, j_idx]
    if len(vals) > max_lines:  # the strongest lines, as the page does
        keep = np.argsort(-vals, kind="stable")[:max_lines]
        h_idx, i_idx, j_idx, vals = h_idx[keep], i_idx[keep], j_idx[keep], vals[keep]
    out = [f'<text x="4" y="16" font-weight="bold">Layer {cap.layers[layer]}, '
           f"{escape(KIND_TITLES[kind])}</text>"]  # fmt: skip
    for n, head in enumerate(hs):  # the legend: one colour chip per drawn head
        x = 2 * colw + gap - 36 * (len(hs) - n)
        number, color = cap.heads[head], head_color(cap.heads[head])
        out.append(f'<rect x="{x}" y="5" width="30" height="15" rx="3" fill="{color}"/>'
                   f'<text x="{x + 15}" y="16" text-anchor="middle" fill="#fff" '
                   f'font-size="11">{number}</text>')  # fmt: skip
    y = lambda r: top + r * rh + rh / 2  # noqa: E731
    for hk, i, j, v in zip(h_idx, i_idx, j_idx, vals, strict=True):
        head = hs[hk]
        out.append(
            f'<line data-i="{i}" data-j="{j}" data-head="{head}" x1="{colw}" y1="{y(i)}" '
            f'x2="{colw + gap}" y2="{y(j)}" stroke="{head_color(cap.heads[head])}" '
            f'stroke-width="2" stroke-opacity="{v:.4f}"/>'
        )
    for i, tok in enumerate(cap.tokens):
        out.append(f'<text x="{colw - 4}" y="{y(i) + 4}" text-anchor="end">{escape(tok)}</text>')
        out.append(f'<text x="{colw + gap + 4}" y="{y(i) + 4}">{escape(tok)}</text>')
    return svg_doc(2 * colw + gap, top + t * rh + 8, "\n".join(out) + "\n")


def model_svg(cap, *, kind="attention", thumb=72):
    """The model view: every layer x head heatmap (rows query tokens, columns keys)."""
    w = view_weights(cap, kind)  # [L, H, T, T]
    n_l, n_h = w.shape[:2]
    lab, gap, top = 34, 6, 40
    out = [f'<text x="4" y="16" font-weight="bold">{escape(KIND_TITLES[kind])}</text>']
    for hi, h in enumerate(cap.heads):
        x = lab + hi * (thumb + gap) + thumb / 2
        out.append(f'<text x="{x}" y="{top - 6}" text-anchor="middle" fill="#666">H{h}</text>')
    for li, layer in enumerate(cap.layers):
        y0 = top + li * (thumb + gap)
        out.append(f'<text x="{lab - 6}" y="{y0 + thumb / 2 + 4}" text-anchor="end" '
                   f'fill="#666">L{layer}</text>')  # fmt: skip
        for hi, h in enumerate(cap.heads):
            rgba = np.zeros(w.shape[2:] + (4,), np.uint8)
            rgba[..., :3] = [int(head_color(h)[k : k + 2], 16) for k in (1, 3, 5)]
            rgba[..., 3] = np.rint(np.clip(w[li, hi], 0, 1) * 255)
            data = base64.b64encode(png_bytes(rgba)).decode("ascii")
            x0 = lab + hi * (thumb + gap)
            out.append(
                f'<rect x="{x0 - 0.5}" y="{y0 - 0.5}" width="{thumb + 1}" height="{thumb + 1}" '
                f'fill="none" stroke="#ddd"/><image data-layer="{li}" data-head="{hi}" '
                f'x="{x0}" y="{y0}" width="{thumb}" height="{thumb}" '
                f'preserveAspectRatio="none" style="image-rendering:pixelated" '
                f'href="data:image/png;base64,{data}"/>'
            )
    return svg_doc(lab + n_h * (thumb + gap), top + n_l * (thumb + gap), "\n".join(out) + "\n")


def to_svg(cap: Capture, view: str = "head", **options) -> str:
    """A standalone SVG of one view of one capture.

    Args:
      cap: the capture (attention; alpha_fx_norm for kind="norm"; queries and
        keys for the neuron view).
      view: "head", "model", "neuron" or "stats".
      **options: head: layer, heads, kind, min_weight, max_lines; model: kind,
        thumb; neuron: layer, head, token; stats: kind. Layer and head are axis
        indices into ``cap.layers`` / ``cap.heads``.

    Raises:
      ValueError: an unknown view, or the capture lacks a quantity it needs.
    """
    makers = dict(head=head_svg, model=model_svg, neuron=svg_cells.neuron_svg,
                  stats=svg_cells.stats_svg)  # fmt: skip
    if view not in makers:
        raise ValueError(f"unknown view {view!r}; choose from {', '.join(makers)}")
    try:
        return makers[view](cap, **options)
    except AttributeError as e:  # a quantity the capture lacks
        raise ValueError(str(e)) from None
