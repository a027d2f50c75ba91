"""Static SVG of a view, written from Python (no browser): vector output for papers.

    svg = to_svg(cap, "head", layer=2, heads=[0, 3])
    svg = to_svg(cap, "model", kind="norm")
    svg = to_svg(cap, "neuron", layer=2, head=3, token=5)
    svg = to_svg(cap, "stats")

The drawings follow the HTML views: head-view lines with stroke-opacity = weight /
heads drawn, as BertViz (each carrying data-i, data-j, data-head and the weight in
data-w like the page's), model-view heat maps
(embedded PNG images), the neuron view (cells, position indices, lines from the
query with opacity = softmax weight, sentences A/B marked; a colour bar for each of
q and k, q×k, q·k and softmax, blue positive, orange negative) and the stats grids
(`jaxattn.views.stats_svg`).

Every view is laid out from its counts (heads, layers, tokens, label widths) in
bands that cannot overlap: <g class="title">, <g class="legend"> (head chips,
wrapped to the width), <g class="colorbar"> (the scale with its min and max
numbers) and <g class="plot">. Every heat map has a colour bar; all maps of one
model view share one scale, [min(0, min), max] of the weights drawn.

Model-view maps longer than their thumbnail are down-scaled by MAX POOLING: a
pixel shows the largest weight of its block of (query, key) cells. A [SEP]
column or the diagonal is one cell wide; area averaging over the k x k block
of a pixel (k ~ 4 at 300 tokens in a 72 px map) would dilute such a stripe to
about 1/k of its weight against the diffuse background, and nearest-neighbour
sampling (what the browser does to an unpooled image) drops most of its cells
altogether. Max pooling keeps both stripes at their full weight; the price is
that a pixel never shows how many of its cells are strong. Token tick labels
are thinned to at least 11 px apart, [CLS]/[SEP]-like tokens labelled first.
"""

from __future__ import annotations

import base64
from html import escape

import numpy as np

from jaxattn.analysis.tokens import display_tokens
from jaxattn.capture import Capture
from jaxattn.views.causal import causal_mask, is_causal
from jaxattn.views.drawing import (
    KIND_TITLES,
    PAD,
    colorbar,
    head_color,
    label_stride,
    png_bytes,
    scale_color,
    scale_rgb,
    short,
    svg_doc,
    text_width,
    thin_ticks,
    title,
    value_range,
)
from jaxattn.views.long_maps import head_map, is_long, pooled_maps
from jaxattn.views.payload import kv_heads
from jaxattn.views.stats_svg import stats_svg

CHIP = 36
HEAD_MAX_TOKENS = 256  # the head view's default window of a longer text
NEURON_MAX_KEYS = 128  # the neuron view's default window of keys of a longer text
CAUSAL_NOTE = (
    "causal: each token attends to itself and earlier tokens (j ≤ i); nothing is drawn for j > i"
)
MASKED = "#eeeeee"  # the masked future (j > i) of a decoder's heat map


def _note(x: float, y: float, text: str) -> tuple[str, float, float]:
    """One caption line as <g class="causal">: (svg, width, height)."""
    body = f'<text x="{x}" y="{y + 12}" font-size="11" fill="#555">{escape(text)}</text>'
    return f'<g class="causal">{body}</g>', text_width(text, 11), 16


def window(t: int, span, default: int, around: int | None = None) -> tuple[int, int]:
    """[start, stop) of tokens to draw: `span` when given, else all `t` up to `default`,
    else `default` tokens (ending at `around` + 1 when given, else from 0)."""
    if span is not None:
        lo, hi = (int(v) for v in span)
        if not 0 <= lo < hi <= t:
            raise ValueError(f"window {span} is out of range: start < stop within 0..{t}")
        return lo, hi
    if t <= default:
        return 0, t
    if around is None:
        return 0, default
    hi = min(t, max(default, around + 1))
    return hi - default, hi


def _gray(v: float) -> str:  # #333 at opacity v over white: the head view's line scale
    c = int(round(255 - min(1.0, max(0.0, v)) * (255 - 0x33)))
    return f"#{c:02x}{c:02x}{c:02x}"


def _legend(x, y, cap, hs, width) -> tuple[str, float, float]:
    """The head chips, wrapped to `width`: (svg, width, height)."""
    per_row = max(1, int((width - 44) // CHIP))
    out = [f'<g class="legend"><text x="{x}" y="{y + 12}" fill="#444">heads</text>']
    for n, head in enumerate(hs):
        cx, cy = x + 44 + CHIP * (n % per_row), y + 20 * (n // per_row)
        number, color = cap.heads[head], head_color(cap.heads[head])
        out.append(
            f'<rect x="{cx}" y="{cy}" width="30" height="15" rx="3" fill="{color}"/>'
            f'<text x="{cx + 15}" y="{cy + 11.5}" text-anchor="middle" fill="#fff" '
            f'font-size="11">{number}</text>'
        )
    rows = -(-len(hs) // per_row)
    return "\n".join(out) + "</g>", 44 + CHIP * min(len(hs), per_row), 20 * rows - 5


def head_svg(
    cap, *, layer=0, heads=None, kind="attention", min_weight=0.0, max_lines=5000, tokens=None
):
    """The head view of layer index `layer` (axis index into ``cap.layers``), of the
    tokens [start, stop) of `tokens` (default: all up to `HEAD_MAX_TOKENS`, else the
    first `HEAD_MAX_TOKENS`): the window's queries and keys and the lines between them."""
    lo, hi = window(cap.length, tokens, HEAD_MAX_TOKENS)
    rows = slice(lo, hi)  # one head at a time: never the whole [L, H, T, T]
    w = np.stack([head_map(cap, kind, layer, h, rows)[:, rows] for h in range(len(cap.heads))])
    hs = list(range(w.shape[0])) if heads is None else list(heads)
    t, rh, gap = hi - lo, 18, 220
    toks = [short(tok, 24) for tok in display_tokens(cap.tokens)[lo:hi]]
    colw = min(220, max(60, max(text_width(s) for s in toks) + 10))
    h_idx, i_idx, j_idx = np.nonzero(w[hs] > max(min_weight, 0.0))
    vals = w[hs][h_idx, i_idx, j_idx]
    i_idx, j_idx = i_idx + lo, j_idx + lo
    if len(vals) > max_lines:  # the strongest lines, as the page does
        keep = np.argsort(-vals, kind="stable")[:max_lines]
        h_idx, i_idx, j_idx, vals = h_idx[keep], i_idx[keep], j_idx[keep], vals[keep]
    part = f", tokens {lo}–{hi - 1} of {cap.length}" if hi - lo < cap.length else ""
    head, tw, th = title(PAD, PAD, f"Layer {cap.layers[layer]}, {KIND_TITLES[kind]}{part}")
    notes = [CAUSAL_NOTE] if is_causal(cap) else []
    if part:
        notes.append(
            f"lines between tokens {lo}–{hi - 1} only (tokens=(start, stop) picks another)"
        )
    note = [_note(PAD, PAD + th + 2 + 16 * k, text) for k, text in enumerate(notes)]
    th += 16 * len(note)
    width = max(2 * colw + gap, tw, 44 + CHIP * min(len(hs), 4), *(n[1] for n in note))
    band = PAD + th + 8
    cb_w = 180
    side = 44 + CHIP * len(hs) + 24 + cb_w <= width  # legend and colour bar on one band
    leg, lw, lh = _legend(PAD, band, cap, hs, width - (cb_w + 24 if side else 0))
    cb_x, cb_y = (PAD + lw + 24, band) if side else (PAD, band + lh + 10)
    n = max(len(hs), 1)
    label = "line opacity = weight" + (f" / {n} heads" if n > 1 else "")
    bar, cw, ch = colorbar(cb_x, cb_y, 0.0, 1.0, label, width=cb_w, color=_gray)
    top = max(band + lh, cb_y + ch) + 12
    x1, x2 = PAD + colw, PAD + colw + gap
    y = lambda r: top + r * rh + rh / 2  # noqa: E731
    out = [head, *(n[0] for n in note), leg, bar, '<g class="plot">']
    for hk, i, j, v in zip(h_idx, i_idx, j_idx, vals, strict=True):
        h = hs[hk]
        out.append(
            f'<line data-i="{i}" data-j="{j}" data-head="{h}" x1="{x1}" y1="{y(i - lo)}" '
            f'x2="{x2}" y2="{y(j - lo)}" stroke="{head_color(cap.heads[h])}" '
            f'stroke-width="2" stroke-opacity="{v / n:.4f}" data-w="{v:.4f}"/>'
        )
    for r, tok in enumerate(toks):
        out.append(f'<text x="{x1 - 4}" y="{y(r) + 4}" text-anchor="end">{escape(tok)}</text>')
        out.append(f'<text x="{x2 + 4}" y="{y(r) + 4}">{escape(tok)}</text>')
    out.append("</g>")
    width = max(width, cb_x - PAD + cw)
    return svg_doc(width + 2 * PAD, top + t * rh + PAD, "\n".join(out) + "\n")


def model_svg(cap, *, kind="attention", thumb=None):
    """The model view: every layer x head heat map (rows query tokens, columns keys),
    max-pooled to `thumb` px (default: from the counts, about 960 px wide in all). A
    decoder's future (j > i) is masked: transparent pixels over a grey triangle, left out
    of the pooling and of the colour scale."""
    n_l, n_h, t = len(cap.layers), len(cap.heads), cap.length
    causal = is_causal(cap)
    gap = 12  # > the 11 px between tick labels: a row's last and the next's first
    lab = max(text_width(f"L{v}") for v in cap.layers) + 10
    toks = [short(tok, 12) for tok in display_tokens(cap.tokens)]
    tick = max(text_width(s, 9) for s in toks) + 6
    if thumb is None:
        thumb = (960 - lab - tick) / n_h - gap
        thumb = int(np.clip(thumb, 40, min(320, max(72, 24 * t))))
    res = min(t, thumb)
    maps, lo, hi = pooled_maps(cap, kind, res, causal)
    pooled = f", max-pooled to {res}×{res} px" if res < t else ""
    head, tw, th = title(PAD, PAD, f"Model view: {KIND_TITLES[kind]}, {t} tokens{pooled}")
    note, nw, nh = _note(PAD, PAD + th + 2, CAUSAL_NOTE + " (grey)") if causal else ("", 0, 0)
    th += nh
    bar, cw, ch = colorbar(PAD, PAD + th + 8, lo, hi, f"{KIND_TITLES[kind]} (one scale, all maps)")
    top = PAD + th + 8 + ch + 12
    # pixels (r, c) of a pooled map with no allowed cell: c > r (the blocks share edges)
    shown = causal_mask(res) if causal else np.ones((res, res), bool)
    grid_top, step, pitch = top + 18, thumb + gap, thumb / t
    x_of = lambda hi_: PAD + lab + hi_ * step  # noqa: E731
    out = [head, note, bar, '<g class="plot">']
    hk = label_stride(n_h, step, max(text_width(f"H{h}") for h in cap.heads))
    for hi_, h in list(enumerate(cap.heads))[::hk]:
        out.append(
            f'<text x="{x_of(hi_) + thumb / 2}" y="{top + 12}" text-anchor="middle" '
            f'fill="#666">H{h}</text>'
        )
    ticks = thin_ticks(display_tokens(cap.tokens), pitch)
    right, bottom = x_of(n_h) - gap, grid_top + n_l * step - gap
    lk = label_stride(n_l, step, 14)
    for li, layer in enumerate(cap.layers):
        y0 = grid_top + li * step
        if li % lk == 0:
            out.append(
                f'<text x="{PAD + lab - 6}" y="{y0 + min(thumb / 2, 40) + 4}" '
                f'text-anchor="end" fill="#666">L{layer}</text>'
            )
        for i in ticks:  # query tokens, right of the last column
            out.append(
                f'<text class="tick" x="{right + 3}" y="{y0 + (i + 0.5) * pitch + 3:.1f}" '
                f'font-size="9" fill="#666">{escape(toks[i])}</text>'
            )
        for hi_ in range(n_h):
            img = np.zeros((res, res, 4), np.uint8)
            img[..., :3] = scale_rgb(maps[li, hi_], lo, hi)
            img[..., 3] = np.where(shown, 255, 0)
            data = base64.b64encode(png_bytes(img)).decode("ascii")
            x0 = x_of(hi_)
            under = f'fill="{MASKED}" class="masked"' if causal else 'fill="none"'
            out.append(
                f'<rect x="{x0 - 0.5}" y="{y0 - 0.5}" width="{thumb + 1}" height="{thumb + 1}" '
                f'{under} stroke="#ddd"/><image data-layer="{li}" data-head="{hi_}" '
                f'data-res="{res}" x="{x0}" y="{y0}" width="{thumb}" height="{thumb}" '
                f'preserveAspectRatio="none" style="image-rendering:pixelated" '
                f'href="data:image/png;base64,{data}"/>'
            )
    for hi_ in range(n_h):  # key tokens, under the last row, reading downwards
        for j in ticks:
            x = x_of(hi_) + (j + 0.5) * pitch - 3
            out.append(
                f'<text class="tick" x="{x:.1f}" y="{bottom + 3}" font-size="9" '
                f'fill="#666" transform="rotate(90 {x:.1f} {bottom + 3})">'
                f"{escape(toks[j])}</text>"
            )
    out.append("</g>")
    width = max(right + tick, PAD + tw, PAD + cw, PAD + nw)
    return svg_doc(width + PAD, bottom + tick + PAD, "\n".join(out) + "\n")


def neuron_values(cap: Capture, layer: int, head: int, token: int) -> dict[str, np.ndarray]:
    """q [K], k [T, K] (head `head`'s key/value head, `kv_heads`), q×k [T, K], q·k [T],
    softmax_j(q·k/√K) [T] and the keys the query sees [T] (a decoder's: j <= token; the
    softmax is over those, 0 elsewhere), in float64."""
    q = np.asarray(cap.array("queries")[layer, head, token], np.float64)
    k = np.asarray(cap.array("keys")[layer, kv_heads(cap)[head]], np.float64)
    qk = q * k
    dot = qk.sum(-1)
    seen = np.arange(len(dot)) <= token if is_causal(cap) else np.ones(len(dot), bool)
    s = np.where(seen, dot / np.sqrt(q.shape[-1]), -np.inf)
    e = np.exp(s - s.max())
    return dict(query=q, key=k, qk=qk, dot=dot, softmax=e / e.sum(), seen=seen)


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


def neuron_svg(cap: Capture, *, layer=0, head=0, token=0, tokens=None) -> str:
    """The neuron view of (layer, head) axis indices and query position `token`.

    Left to right: every token as a query (the selected one highlighted) with its
    position index; lines from the selected query to every key, stroke-opacity =
    its softmax weight (the attention row, as the page's lines; all keys, where the
    page can filter by sentence); each key's index and token, k, the terms q×k, q·k
    and the softmax. For a pair, brackets name sentences A and B and a dashed line
    marks where B starts. <line class="nv-line" data-i data-j data-w>,
    <text class="idx" data-side="query|key" data-idx>.

    A grouped-query head's keys are its key/value head's (the title names it). A
    decoder's query sees keys j <= token: the softmax is over those; later keys are
    greyed (<g class="nv-masked" data-j>), without a line or a softmax. Rows are the
    tokens [start, stop) of `tokens` (default: all up to `NEURON_MAX_KEYS`, else the
    `NEURON_MAX_KEYS` ending at the query); the softmax stays the one over all keys.
    """
    v = neuron_values(cap, layer, head, token)
    n_k = v["key"].shape[1]
    lo, hi = window(cap.length, tokens, NEURON_MAX_KEYS, around=token)
    if not lo <= token < hi:
        raise ValueError(f"token {token} is outside the window tokens=({lo}, {hi})")
    n_t = hi - lo
    toks = [short(t, 16) for t in display_tokens(cap.tokens)]
    cw, rh, lw, iw = 9, 16, 90, 26
    lab = max(40, max(text_width(t) for t in toks[lo:hi]) + 14)
    b = cap.sentence_b_start if cap.sentence_b_start and lo < cap.sentence_b_start < hi else None
    x_q = PAD + (20 if b else 0)  # the query column: token, then its index
    x_l = x_q + lab + iw  # the lines, then the keys: index, token, cells
    x_k = x_l + lw + iw + lab
    x_qk, x_dot = x_k + n_k * cw + 12, x_k + 2 * (n_k * cw + 12)
    x_sm = x_dot + 62
    width = x_sm + 64 - PAD
    query = f'query "{short(display_tokens(cap.tokens)[token], 24)}" ({token})'
    groups = kv_heads(cap)
    n_kv = cap.tensors["keys"].shape[1]
    kv = f" (key/value head {groups[head]} of {n_kv})" if n_kv != len(cap.heads) else ""
    text = f"Layer {cap.layers[layer]}, head {cap.heads[head]}{kv}, {query}"
    head_, tw, th = title(PAD, PAD, text)
    notes = []
    if is_causal(cap):
        notes.append("causal: the query sees itself and earlier keys (j ≤ i); later keys greyed")
    if n_t < cap.length:
        notes.append(f"keys {lo}–{hi - 1} of {cap.length} (tokens=(start, stop) picks others)")
    note = [_note(PAD, PAD + th + 2 + 16 * k, t_) for k, t_ in enumerate(notes)]
    th += 16 * len(note)
    width = max(width, tw, *(n[1] for n in note))
    seen = v["seen"][lo:hi]
    rows = slice(lo, hi)
    qk_range = value_range(np.concatenate([v["key"][rows][seen].ravel(), v["query"]]))
    scales = {
        "q, k": qk_range,
        "q × k": value_range(v["qk"][rows][seen]),
        "q · k": value_range(v["dot"][rows][seen]),
        "softmax": value_range(v["softmax"][rows][seen]),
    }
    names = {"softmax": "softmax (lines: opacity = weight)"}
    bars, bh = _bars(PAD, PAD + th + 8, width, [(names.get(k, k), *r) for k, r in scales.items()])
    color = {k: (lambda x, r=r: scale_color(x, *r)) for k, r in scales.items()}
    q_y = PAD + th + 8 + bh + 12
    top = q_y + rh + 24
    y = lambda r: top + (r - lo) * rh + (rh - 2) / 2  # noqa: E731
    line_color = head_color(cap.heads[head])
    out = [
        head_,
        *(n[0] for n in note),
        bars,
        '<g class="plot">',  # the selected query's row, then the q row
        f'<rect x="{x_q - 2}" y="{top + (token - lo) * rh - 1}" width="{lab + iw}" '
        f'height="{rh}" fill="#eef4fb"/>'
        f'<text x="{x_k - 6}" y="{q_y + 11}" text-anchor="end">q</text>',
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
        out += _sentences(PAD, top, rh, n_t, b - lo, x_sm + 54)
    for j in range(lo, hi):
        ry, w = top + (j - lo) * rh, v["softmax"][j]
        weight = ' font-weight="bold"' if j == token else ""
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
        if not v["seen"][j]:  # a decoder's future key: greyed, no line, no softmax
            out.append(
                f'<g class="nv-masked" data-j="{j}"><rect x="{x_k}" y="{ry}" '
                f'width="{x_sm + 54 - x_k}" height="{rh - 2}" fill="{MASKED}"/>'
                f'<text x="{x_sm + 52}" y="{ry + 11}" text-anchor="end" font-size="10" '
                'fill="#999">masked</text></g>'
            )
            continue
        out.append(
            f'<line class="nv-line" data-i="{token}" data-j="{j}" data-w="{w:.4f}" '
            f'x1="{x_l + 2}" y1="{y(token)}" x2="{x_l + lw - 2}" y2="{y(j)}" '
            f'stroke="{line_color}" stroke-width="2" stroke-opacity="{w:.4f}"/>'
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


OPTIONS = {
    "head": ("layer", "heads", "kind", "min_weight", "max_lines", "tokens"),
    "model": ("kind", "thumb"),
    "neuron": ("layer", "head", "token", "tokens"),
    "stats": ("kind",),
}


def _check(cap: Capture, view: str, options: dict) -> None:
    """One-line ValueErrors for options a view cannot draw."""
    unknown = sorted(set(options) - set(OPTIONS[view]))
    if unknown:
        raise ValueError(
            f"the {view} view takes no {', '.join(unknown)}; "
            f"its options: {', '.join(OPTIONS[view])}"
        )
    if cap.length == 0:
        raise ValueError("the capture has no tokens: capture a non-empty text")
    if view != "neuron":  # queries and keys are whole whatever the maps hold
        cap.check_full_maps(f"the {view} view")
    if view == "stats" and is_long(cap):  # Clark et al.'s statistics: [L, H, T, T] float64
        raise ValueError(
            f"the stats view of a {cap.length}-token capture is its statistics along the "
            "text: write the HTML stats-first page (jaxattn view --stats-first)"
        )
    if options.get("kind", "attention") not in KIND_TITLES:
        raise ValueError(f"unknown kind {options['kind']!r}; choose from {', '.join(KIND_TITLES)}")
    heads = [] if options.get("heads") is None else list(options["heads"])
    for name, values, n, axis in (
        ("layer", [options.get("layer", 0)], len(cap.layers), "cap.layers"),
        ("head", [options.get("head", 0), *heads], len(cap.heads), "cap.heads"),
        ("token", [options.get("token", 0)], cap.length, "the tokens"),
    ):
        bad = [v for v in values if not 0 <= v < n]
        if bad:
            raise ValueError(f"{name} {bad[0]} is out of range: an index into {axis} (0..{n - 1})")


def to_svg(cap: Capture, view: str = "head", **options) -> str:
    """A standalone SVG of one view of one capture.

    Args:
      cap: the capture (attention; alpha_fx_norm for kind="norm"; queries and
        keys for the neuron view).
      view: "head", "model", "neuron" or "stats".
      **options: head: layer, heads, kind, min_weight, max_lines, tokens; model:
        kind, thumb (px per map; default from the counts); neuron: layer, head,
        token, tokens; stats: kind. tokens=(start, stop) is the window of tokens
        drawn (a long text's default: `HEAD_MAX_TOKENS` from its start in the head
        view, `NEURON_MAX_KEYS` ending at the query in the neuron view).
        Layer and head are axis indices into ``cap.layers`` / ``cap.heads``; kind
        is "attention" or "norm".

    Raises:
      ValueError: an unknown view, option or kind, an index out of range, an
        empty capture, or one lacking a quantity the view needs.
    """
    makers = dict(head=head_svg, model=model_svg, neuron=neuron_svg, stats=stats_svg)
    if view not in makers:
        raise ValueError(f"unknown view {view!r}; choose from {', '.join(makers)}")
    _check(cap, view, options)
    try:
        return makers[view](cap, **options)
    except AttributeError as e:  # a quantity the capture lacks
        raise ValueError(str(e)) from None
