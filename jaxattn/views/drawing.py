"""Drawing pieces the static views share: head colours, PNG bytes, the SVG frame,
the heat maps' colour scale and colour bar, max pooling, thinned tick labels and
the text-width estimate the layouts are computed from; `SVG`, the text a notebook
shows as a picture."""

from __future__ import annotations

import re
import struct
import zlib
from html import escape

import numpy as np

PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#393b79",
    "#637939",
)
KIND_TITLES = {"attention": "attention α", "norm": "norm-based ‖αf(x)‖"}
FONT = 'font-family="DejaVu Sans, Arial, sans-serif"'
PAD = 8  # px around a static view and its bands


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
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


class SVG(str):
    """SVG text that a notebook shows as a picture: a `str` (written, concatenated and
    compared as the text it is) whose `_repr_svg_` Jupyter calls to draw it. Every
    static view's SVG is one (`svg_doc`)."""

    __slots__ = ()

    def _repr_svg_(self) -> str:
        return str(self)


LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(text: str) -> str:
    """`text` with each lone surrogate (a code point UTF-8 cannot encode: a non-UTF-8
    file name's byte as Python reads it, half of a pair cut apart) as U+FFFD, as a
    browser shows it: a page or an SVG holding one could not be written."""
    return LONE_SURROGATE.sub("\ufffd", text)


def svg_doc(width: float, height: float, body: str) -> SVG:
    """A standalone SVG document of the given size (`encodable`)."""
    body = encodable(body)
    return SVG(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" {FONT} font-size="12">\n'
        f'<rect width="100%" height="100%" fill="#fff"/>\n{body}</svg>\n'
    )


# Colour scales of the heat maps: ColorBrewer "Blues" for values >= 0 and
# "Oranges" for values < 0 (diverging around 0 when a scale has both signs).
BLUES = np.array([(255, 255, 255), (158, 202, 225), (49, 130, 189), (8, 48, 107)], np.float64)
ORANGES = np.array([(255, 255, 255), (253, 174, 107), (230, 85, 13), (127, 39, 4)], np.float64)


def _ramp(stops: np.ndarray, t: np.ndarray) -> np.ndarray:
    pos = np.clip(np.asarray(t, np.float64), 0, 1) * (len(stops) - 1)
    k = np.minimum(pos.astype(int), len(stops) - 2)
    f = (pos - k)[..., None]
    return np.rint(stops[k] * (1 - f) + stops[k + 1] * f).astype(np.uint8)


def scale_rgb(v, lo: float, hi: float) -> np.ndarray:
    """RGB (uint8, [..., 3]) of values `v` on the scale [lo, hi].

    lo >= 0: white -> dark blue from lo to hi. lo < 0: diverging, blue above 0,
    orange below, both reaching full colour at max(|lo|, |hi|).
    """
    v = np.asarray(v, np.float64)
    if lo >= 0:
        return _ramp(BLUES, (v - lo) / (hi - lo) if hi > lo else np.zeros_like(v))
    m = max(-lo, hi)
    return np.where((v >= 0)[..., None], _ramp(BLUES, v / m), _ramp(ORANGES, -v / m))


def scale_color(v: float, lo: float, hi: float) -> str:
    """'#rrggbb' of one value on the scale [lo, hi] (see `scale_rgb`)."""
    r, g, b = scale_rgb(v, lo, hi).tolist()
    return f"#{r:02x}{g:02x}{b:02x}"


def value_range(values) -> tuple[float, float]:
    """The colour scale of some values: [min(0, min), max], never empty; NaN/None ignored."""
    x = np.asarray([v for v in np.ravel(values) if v is not None], np.float64)
    x = x[np.isfinite(x)]
    lo = min(0.0, float(x.min())) if x.size else 0.0
    hi = float(x.max()) if x.size else 1.0
    return lo, hi if hi > lo else lo + 1.0


def fmt(v: float) -> str:
    """A colour-bar number: 3 significant digits."""
    return f"{v:.3g}"


def text_width(s: str, size: float = 12) -> float:
    """A generous estimate of the rendered width of `s` in DejaVu Sans at `size` px."""
    wide = sum(1 for ch in s if ord(ch) >= 0x1100)  # CJK and other wide characters
    return (0.64 * (len(s) - wide) + 1.0 * wide) * size


def title(x: float, y: float, text: str) -> tuple[str, float, float]:
    """The view's title as <g class="title"> at top-left (x, y): (svg, width, height)."""
    body = f'<text x="{x}" y="{y + 14}" font-weight="bold">{escape(text)}</text>'
    return f'<g class="title">{body}</g>', text_width(text, 12) + 4, 18


def colorbar(x, y, lo, hi, label, *, width=180, color=None) -> tuple[str, float, float]:
    """A horizontal colour bar at (x, y) stating its range: (svg, width, height).

    <g class="colorbar" data-min data-max>: the label, the ramp (`color(v)` per
    step, default `scale_color` on [lo, hi]) and the numbers lo and hi (and 0
    when the scale crosses it) under its ends.
    """
    color = color or (lambda v: scale_color(v, lo, hi))
    n, bar_y = 48, y + 18
    out = [
        f'<g class="colorbar" data-min="{lo:.6g}" data-max="{hi:.6g}">',
        f'<text x="{x}" y="{y + 12}" font-size="11" fill="#444">{escape(label)}</text>',
    ]
    for k in range(n):
        v = lo + (hi - lo) * (k + 0.5) / n
        out.append(
            f'<rect x="{x + k * width / n:.2f}" y="{bar_y}" width="{width / n + 0.3:.2f}" '
            f'height="10" fill="{color(v)}"/>'
        )
    out.append(f'<rect x="{x}" y="{bar_y}" width="{width}" height="10" fill="none" stroke="#888"/>')
    zero = width * -lo / (hi - lo)  # where 0 is, labelled when clear of both ends
    ticks = [(lo, "start"), (hi, "end")] + ([(0.0, "middle")] if 30 < zero < width - 30 else [])
    for v, anchor in ticks:
        tx = x + width * (v - lo) / (hi - lo)
        out.append(
            f'<text class="cb-tick" x="{tx:.2f}" y="{bar_y + 22}" font-size="10" '
            f'text-anchor="{anchor}" fill="#444">{fmt(v)}</text>'
        )
    out.append("</g>")
    w = max(width, text_width(label, 11))
    return "\n".join(out), w, 18 + 10 + 16


def max_pool(m: np.ndarray, res: int) -> np.ndarray:
    """[T, T] -> [res, res]: each pixel the maximum of its block of cells (res <= T).

    Max pooling keeps one-cell-wide stripes (a [SEP] column, the diagonal) at
    their full value, where an average over a block of k x k cells would divide
    them by about k and a nearest-neighbour pick would drop most of them.
    """
    edges = np.arange(res) * m.shape[0] // res  # block r: cells T r // res .. (as the page)
    cols = np.maximum.reduceat(m, edges, axis=1)
    return np.maximum.reduceat(cols, edges, axis=0)


def is_special(tok: str) -> bool:
    """[CLS], [SEP], <s>, </s> and the like."""
    return tok[:1] in "[<" and tok[-1:] in "]>" and len(tok) > 2


def thin_ticks(tokens, pitch: float, spacing: float = 11.0) -> list[int]:
    """Indices of the tokens to label on an axis of `pitch` px per token, at least
    `spacing` px apart: special tokens first ([SEP] stripes are the landmarks),
    then the others in a regular stride."""
    t = len(tokens)
    order = [i for i in range(t) if is_special(tokens[i])]
    stride = max(1, int(np.ceil(spacing / pitch))) if pitch > 0 else t
    special = set(order)
    order += [i for i in range(0, t, stride) if i not in special]
    kept: list[int] = []
    for i in order:
        if all(abs(i - k) * pitch >= spacing for k in kept):
            kept.append(i)
    return sorted(kept)


def short(tok: str, n: int = 12) -> str:
    """A token label cut to `n` characters."""
    return tok if len(tok) <= n else tok[: n - 1] + "…"


def label_stride(n: int, pitch: float, extent: float) -> int:
    """Label every k-th of n rows/columns `pitch` px apart so labels `extent` px long fit."""
    return max(1, int(np.ceil((extent + 4) / pitch))) if n > 1 and pitch > 0 else 1
