"""A line chart of a few time series, as a small standalone SVG (no plotting library).

    svg = line_chart({"replica 0": [(0.0, 812.5), (1.0, 840.1)], ...},
                     title="RSS (MiB)", events={"faults armed": 12.0}, y_label="MiB")
    Path("rss.svg").write_text(svg)

One polyline per series, its name in a legend; each event a dashed vertical
line with its name; axes with a few round ticks. Stdlib only.
"""

from __future__ import annotations

import math
from html import escape

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f")
WIDTH, HEIGHT = 900, 420
LEFT, RIGHT, TOP, BOTTOM = 70, 180, 40, 50


def ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    """About `n` round values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(1, n - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first, last = math.floor(lo / step) * step, math.ceil(hi / step) * step
    return [round(first + k * step, 10) for k in range(round((last - first) / step) + 1)]


def line_chart(
    series: dict[str, list[tuple[float, float]]],
    *,
    title: str,
    events: dict[str, float] | None = None,
    x_label: str = "seconds",
    y_label: str = "",
    y_from_zero: bool = True,
) -> str:
    """The SVG text of a chart of `series` (name -> [(x, y)]) with `events` (name -> x)."""
    points = [p for values in series.values() for p in values]
    xs = [p[0] for p in points] + list((events or {}).values())
    ys = [p[1] for p in points]
    x_ticks = ticks(min(xs, default=0.0), max(xs, default=1.0))
    y_ticks = ticks(0.0 if y_from_zero else min(ys, default=0.0), max(ys, default=1.0))
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (x - x0) / ((x1 - x0) or 1) * pw

    def py(y: float) -> float:
        return TOP + ph - (y - y0) / ((y1 - y0) or 1) * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="22" font-size="15">{escape(title)}</text>',
    ]
    for y in y_ticks:
        out.append(
            f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#ddd"/>'
            f'<text x="{LEFT - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:g}</text>'
        )
    for x in x_ticks:
        out.append(f'<text x="{px(x):.1f}" y="{TOP + ph + 18}" text-anchor="middle">{x:g}</text>')
    out.append(
        f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>'
        f'<text x="{LEFT + pw / 2}" y="{HEIGHT - 10}" text-anchor="middle">{escape(x_label)}</text>'
        f'<text x="16" y="{TOP + ph / 2}" transform="rotate(-90 16 {TOP + ph / 2})" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )
    for k, (name, x) in enumerate(sorted((events or {}).items(), key=lambda e: e[1])):
        out.append(
            f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{TOP}" y2="{TOP + ph}" '
            f'stroke="#888" stroke-dasharray="4 3"/>'
            f'<text x="{px(x) + 3:.1f}" y="{TOP + 12 + 12 * (k % 3)}" fill="#555">'
            f"{escape(name)}</text>"
        )
    for k, (name, values) in enumerate(series.items()):
        colour = COLOURS[k % len(COLOURS)]
        line = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in values)
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{line}"/>')
        ly = TOP + 16 * k + 8
        out.append(
            f'<line x1="{LEFT + pw + 12}" x2="{LEFT + pw + 32}" y1="{ly}" y2="{ly}" '
            f'stroke="{colour}" stroke-width="2"/>'
            f'<text x="{LEFT + pw + 38}" y="{ly + 4}">{escape(name)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"
