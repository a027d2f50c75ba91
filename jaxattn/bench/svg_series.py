"""Line charts of a few time series, as a small standalone SVG (no plotting library).

    svg = line_chart({"replica 0": [(0.0, 812.5), (1.0, 840.1)], ...},
                     title="RSS (MiB)", events={"faults armed": 12.0}, y_label="MiB")
    Path("rss.svg").write_text(svg)

    svg = panels_chart([("RSS (MiB)", rss), ("open fds", fds), ("threads", threads)],
                       title="...", events=[("T0", 600.0), ("K1", 1200.0)])

One polyline per series (a `None` among its points breaks the line: a process
restarted under the same name keeps its colour), a colour per series name, the
same in every panel, and one legend; each event a dashed vertical line with its
name (events may repeat a name: pass (name, x) pairs); axes with a few round
ticks, the x axis shared by the panels stacked one above the other. A series
longer than `MAX_POINTS` is drawn with every n-th point. Stdlib only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from html import escape

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f")
WIDTH, HEIGHT = 900, 420  # one panel's chart
LEFT, RIGHT, TOP, BOTTOM = 70, 180, 40, 50
GAP = 40  # between panels
MAX_POINTS = 1500  # per line: a 2-hour series sampled every second draws every 4th

Point = tuple[float, float]
Series = Mapping[str, Sequence[Point | None]]


def ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    """About `n` round values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(1, n - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first, last = math.floor(lo / step) * step, math.ceil(hi / step) * step
    return [round(first + k * step, 10) for k in range(round((last - first) / step) + 1)]


def _lines(values: Sequence[Point | None]) -> list[list[Point]]:
    """The unbroken runs of `values` (split at each None), each thinned to MAX_POINTS."""
    runs: list[list[Point]] = [[]]
    for p in values:
        if p is None:
            runs.append([])
        else:
            runs[-1].append(p)
    return [run[:: max(1, len(run) // MAX_POINTS)] for run in runs if run]


def line_chart(
    series: Series,
    *,
    title: str,
    events: Mapping[str, float] | Iterable[tuple[str, float]] | None = None,
    x_label: str = "seconds",
    y_label: str = "",
    y_from_zero: bool = True,
) -> str:
    """The SVG text of a chart of `series` (name -> [(x, y)]) with `events` (name -> x)."""
    return panels_chart(
        [(y_label, series)], title=title, events=events, x_label=x_label, y_from_zero=y_from_zero
    )


def panels_chart(
    panels: Sequence[tuple[str, Series]],
    *,
    title: str,
    events: Mapping[str, float] | Iterable[tuple[str, float]] | None = None,
    x_label: str = "seconds",
    y_from_zero: bool = True,
    panel_height: int = HEIGHT - TOP - BOTTOM,
) -> str:
    """The SVG text of `panels` ((y label, series) each) stacked over one x axis."""
    marks = sorted(
        (events.items() if isinstance(events, Mapping) else events or ()), key=lambda e: e[1]
    )
    names = list(dict.fromkeys(n for _, series in panels for n in series))
    colour = {n: COLOURS[k % len(COLOURS)] for k, n in enumerate(names)}
    lines = [{n: _lines(v) for n, v in series.items()} for _, series in panels]
    xs = [p[0] for by_name in lines for runs in by_name.values() for run in runs for p in run]
    xs += [x for _, x in marks]
    x_ticks = ticks(min(xs, default=0.0), max(xs, default=1.0))
    x0, x1 = x_ticks[0], x_ticks[-1]
    pw, ph = WIDTH - LEFT - RIGHT, panel_height
    height = TOP + len(panels) * ph + (len(panels) - 1) * GAP + BOTTOM

    def px(x: float) -> float:
        return LEFT + (x - x0) / ((x1 - x0) or 1) * pw

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
        f'<text x="{LEFT}" y="22" font-size="15">{escape(title)}</text>',
    ]
    for k, ((y_label, _), by_name) in enumerate(zip(panels, lines, strict=True)):
        top = TOP + k * (ph + GAP)
        ys = [p[1] for runs in by_name.values() for run in runs for p in run]
        y_ticks = ticks(0.0 if y_from_zero else min(ys, default=0.0), max(ys, default=1.0))
        y0, y1 = y_ticks[0], y_ticks[-1]

        def py(y: float, top=top, y0=y0, y1=y1) -> float:
            return top + ph - (y - y0) / ((y1 - y0) or 1) * ph

        for y in y_ticks:
            out.append(
                f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{py(y):.1f}" y2="{py(y):.1f}" '
                f'stroke="#ddd"/><text x="{LEFT - 6}" y="{py(y) + 4:.1f}" text-anchor="end">'
                f"{y:g}</text>"
            )
        for x in x_ticks:
            out.append(
                f'<text x="{px(x):.1f}" y="{top + ph + 18}" text-anchor="middle">{x:g}</text>'
            )
        mid = top + ph / 2
        out.append(
            f'<rect x="{LEFT}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>'
            f'<text x="16" y="{mid}" transform="rotate(-90 16 {mid})" text-anchor="middle">'
            f"{escape(y_label)}</text>"
        )
        for j, (name, x) in enumerate(marks):
            out.append(
                f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{top}" y2="{top + ph}" '
                f'stroke="#888" stroke-dasharray="4 3"/>'
            )
            if k == 0:  # the events' names once, in the top panel
                out.append(
                    f'<text x="{px(x) + 3:.1f}" y="{top + 12 + 12 * (j % 3)}" fill="#555">'
                    f"{escape(name)}</text>"
                )
        for name, runs in by_name.items():
            for run in runs:
                points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in run)
                out.append(
                    f'<polyline fill="none" stroke="{colour[name]}" stroke-width="1.5" '
                    f'points="{points}"><title>{escape(name)}</title></polyline>'
                )
    out.append(
        f'<text x="{LEFT + pw / 2}" y="{height - 10}" text-anchor="middle">{escape(x_label)}</text>'
    )
    for k, name in enumerate(names):
        ly = TOP + 16 * k + 8
        out.append(
            f'<line x1="{LEFT + pw + 12}" x2="{LEFT + pw + 32}" y1="{ly}" y2="{ly}" '
            f'stroke="{colour[name]}" stroke-width="2"/>'
            f'<text x="{LEFT + pw + 38}" y="{ly + 4}">{escape(name)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"
