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
import struct
import zlib
from html import escape

import numpy as np

from jaxattn.capture import Capture
from jaxattn.views.payload import view_weights

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
           "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939")  # fmt: skip
KIND_TITLES = {"attention": "attention α", "norm": "norm-based ‖αf(x)‖"}
FONT = 'font-family="DejaVu Sans, Arial, sans-serif"'


def head_color(h: int) -> str:
    """The colour of head number `h` (the HTML views' palette)."""
    if h < len(PALETTE):
        return PALETTE[h]
    r, g, b = _hsl((h * 137.5) % 360, 0.6, 0.45)
    return f"#{r:02x}{g:02x}{b:02x}"


def _hsl(h: float, s: float, lum: float) -> tuple[int, int, int]:
    c = (1 - abs(2 * lum - 1)) * s
    x = c * (1 - abs((h / 60) % 2 - 1))
    m = lum - c / 2
    r, g, b = [(c, x, 0), (x, c, 0), (0, c, x), (0, x, c), (x, 0, c), (c, 0, x)][int(h // 60) % 6]
    return tuple(int(round((v + m) * 255)) for v in (r, g, b))


def png_bytes(rgba: np.ndarray) -> bytes:
    """A PNG file of an [H, W, 4] uint8 RGBA image (zlib from the standard library)."""
    h, w, _ = rgba.shape
    raw = b"".join(b"\x00" + rgba[y].tobytes() for y in range(h))

    def chunk(tag: bytes, data: bytes) -> bytes:
        body = tag + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 6, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9)) \
        + chunk(b"IEND", b"")  # fmt: skip


def svg_doc(width: float, height: float, body: str) -> str:
    """A standalone SVG document of the given size."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" {FONT} font-size="12">\n'
        f'<rect width="100%" height="100%" fill="#fff"/>\n{body}</svg>\n'
    )


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
    from jaxattn.views import svg_cells

    makers = dict(head=head_svg, model=model_svg, neuron=svg_cells.neuron_svg,
                  stats=svg_cells.stats_svg)  # fmt: skip
    if view not in makers:
        raise ValueError(f"unknown view {view!r}; choose from {', '.join(makers)}")
    try:
        return makers[view](cap, **options)
    except AttributeError as e:  # a quantity the capture lacks
        raise ValueError(str(e)) from None
