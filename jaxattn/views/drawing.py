"""Drawing pieces the static views share: head colours, PNG bytes, the SVG frame."""

from __future__ import annotations

import struct
import zlib

import numpy as np

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
