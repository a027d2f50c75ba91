"""Static SVG of the neuron view and the stats view (see `jaxattn.views.svg`)."""

from __future__ import annotations

from html import escape

import numpy as np

from jaxattn.capture import Capture
from jaxattn.views.drawing import KIND_TITLES, svg_doc
from jaxattn.views.stats import stats_document


def _color(v: float, vmax: float) -> str:
    a = min(1.0, abs(v) / vmax) if vmax > 0 else 0.0
    return f"rgba(31,119,180,{a:.3f})" if v >= 0 else f"rgba(255,127,14,{a:.3f})"


def neuron_values(cap: Capture, layer: int, head: int, token: int) -> dict[str, np.ndarray]:
    """q [K], k [T, K], q×k [T, K], q·k [T] and softmax_j(q·k/√K) [T], in float64."""
    q = np.asarray(cap.array("queries")[layer, head, token], np.float64)
    k = np.asarray(cap.array("keys")[layer, head], np.float64)
    qk = q * k
    dot = qk.sum(-1)
    s = dot / np.sqrt(q.shape[-1])
    e = np.exp(s - s.max())
    return dict(query=q, key=k, qk=qk, dot=dot, softmax=e / e.sum())


def neuron_svg(cap: Capture, *, layer=0, head=0, token=0) -> str:
    """The neuron view of (layer, head) axis indices and query position `token`."""
    v = neuron_values(cap, layer, head, token)
    n_t, n_k = v["key"].shape
    cw, rh, lab, top = 9, 16, 110, 56
    vmax = max(np.abs(v["key"]).max(), np.abs(v["query"]).max())
    pmax, dmax = np.abs(v["qk"]).max(), np.abs(v["dot"]).max()
    x_qk, x_dot = lab + n_k * cw + 12, lab + 2 * (n_k * cw + 12)
    x_sm = x_dot + 62
    out = [f'<text x="4" y="14" font-weight="bold">Layer {cap.layers[layer]}, head '
           f'{cap.heads[head]}, query "{escape(cap.tokens[token])}" ({token})</text>',
           f'<text x="{lab - 6}" y="33" text-anchor="end">q</text>']  # fmt: skip
    for c in range(n_k):
        out.append(f'<rect x="{lab + c * cw}" y="22" width="{cw - 1}" height="{rh - 2}" '
                   f'fill="{_color(v["query"][c], vmax)}"/>')  # fmt: skip
    for x, name in ((lab, "k"), (x_qk, "q × k"), (x_dot, "q · k"), (x_sm, "softmax")):
        out.append(f'<text x="{x}" y="{top - 4}" font-weight="bold" fill="#555">{name}</text>')
    for j in range(n_t):
        y = top + j * rh
        weight = ' font-weight="bold"' if j == token else ""
        out.append(f'<text x="{lab - 6}" y="{y + 11}" text-anchor="end"{weight}>'
                   f"{escape(cap.tokens[j])}</text>")  # fmt: skip
        for c in range(n_k):
            out.append(f'<rect x="{lab + c * cw}" y="{y}" width="{cw - 1}" height="{rh - 2}" '
                       f'fill="{_color(v["key"][j, c], vmax)}"/><rect x="{x_qk + c * cw}" '
                       f'y="{y}" width="{cw - 1}" height="{rh - 2}" '
                       f'fill="{_color(v["qk"][j, c], pmax)}"/>')  # fmt: skip
        for x, val, m, fmt in (
            (x_dot, v["dot"][j], dmax, ".2f"),
            (x_sm, v["softmax"][j], 1, ".3f"),
        ):
            out.append(f'<rect x="{x}" y="{y}" width="54" height="{rh - 2}" '
                       f'fill="{_color(val, m)}"/><text x="{x + 52}" y="{y + 11}" '
                       f'text-anchor="end" font-size="10">{val:{fmt}}</text>')  # fmt: skip
    return svg_doc(x_sm + 64, top + n_t * rh + 6, "\n".join(out) + "\n")


def _grid(x0, y0, name, layers, heads, values, fill, cell=14) -> tuple[str, float, float]:
    out = [f'<text x="{x0}" y="{y0 + 10}" font-weight="bold">{escape(name)}</text>']
    lab = 28
    for hi, h in enumerate(heads):
        out.append(f'<text x="{x0 + lab + hi * cell + cell / 2}" y="{y0 + 24}" font-size="9" '
                   f'text-anchor="middle" fill="#666">{h}</text>')  # fmt: skip
    for li, layer in enumerate(layers):
        y = y0 + 28 + li * cell
        out.append(f'<text x="{x0 + lab - 4}" y="{y + cell - 3}" font-size="9" '
                   f'text-anchor="end" fill="#666">L{layer}</text>')  # fmt: skip
        for hi in range(len(heads)):
            out.append(f'<rect x="{x0 + lab + hi * cell}" y="{y}" width="{cell - 1}" '
                       f'height="{cell - 1}" fill="{fill(values[li][hi])}"/>')  # fmt: skip
    return "\n".join(out), lab + len(heads) * cell + 16, 32 + len(layers) * cell + 14


def stats_svg(cap: Capture, *, kind="attention") -> str:
    """The stats view: head statistics, Kovaleva classes and Vig patterns, one grid each."""
    doc = stats_document(cap)
    if kind not in doc["kinds"]:
        raise ValueError(f"the capture has no {kind!r} weights")
    k = doc["kinds"][kind]
    colors = ("#1f77b4", "#2ca02c", "#17becf", "#9467bd", "#bbbbbb")
    grids = []
    for name in doc["stats"]:
        g = k["head_stats"][name]
        top = max([v for row in g for v in row if v is not None] or [0])
        grids.append((name, g, lambda v, m=top: "#eee" if v is None else _color(v, m)))
    grids.append(("Kovaleva class", k["kovaleva"], lambda v: colors[v % len(colors)]))
    for name in doc["patterns"]:
        grids.append((name, k["vig"][name], lambda v: "#d62728" if v else "#f3f3f3"))
    out = [f'<text x="4" y="14" font-weight="bold">{escape(KIND_TITLES[kind])}</text>']
    x, y, row_h, width = 4.0, 24.0, 0.0, 0.0
    per_row = 6
    for n, (name, values, fill) in enumerate(grids):
        if n and n % per_row == 0:
            x, y, row_h = 4.0, y + row_h, 0.0
        body, gw, gh = _grid(x, y, name, cap.layers, cap.heads, values, fill)
        out.append(body)
        x += max(gw, 110, 8 * len(name) + 14)
        row_h, width = max(row_h, gh), max(width, x)
    legend_y = y + row_h + 10
    for c, name in enumerate(doc["classes"]):
        out.append(f'<rect x="{4 + c * 130}" y="{legend_y}" width="12" height="12" '
                   f'fill="{colors[c]}"/><text x="{20 + c * 130}" y="{legend_y + 10}">'
                   f"{escape(name)}</text>")  # fmt: skip
    return svg_doc(max(width, 660), legend_y + 20, "\n".join(out) + "\n")
