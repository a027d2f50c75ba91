"""Long examples on the page: max-pooled maps and a band of weights, never T x T.

An example of more than `LONG_TOKENS` tokens (or of more than `LONG_FROM` whose maps
would take over `LONG_MAP_BYTES` as uint8: `is_long`) is embedded without its
[L, H, T, T] maps (8,192 tokens are 64M weights a head). Per layer, head and weight
kind the page holds instead:

- the map max-pooled to `POOL` x `POOL` (`drawing.max_pool`'s blocks: block r holds
  cells floor(r T / POOL) .. floor((r + 1) T / POOL) - 1 of each axis), which the
  model view draws (its 64 px thumbnails pool these blocks further: the blocks nest);
- the BAND of weights within `BAND` tokens of the diagonal: row i's weights on keys
  i - BAND .. i + BAND (a decoder's: i - BAND .. i, the keys it sees), which hold every
  line of a head-view window of `window_size()` = 2 RADIUS + 1 tokens;
- each query's weight on the first token (the sink), which the head view names when
  the window does not hold that token.

So a long example's weights take, per head and kind, at most POOL² + (2 BAND + 2) T
bytes (uint8: the band and the first-token column) before deflate: 2.2 MB at 8,192
tokens (`page.long_page_bound` states the whole page's). The head view shows the
window of `RADIUS` tokens either side of the token hovered, clicked or found
(`token_window`; head.js computes the same). Everything is computed one head at a
time (`head_map`), so no [L, H, T, T] float array is made.
"""

from __future__ import annotations

import numpy as np

from jaxattn.analysis.weights import KINDS
from jaxattn.capture import Capture
from jaxattn.dtypes import dequantize
from jaxattn.errors import UsageError
from jaxattn.views.causal import is_causal
from jaxattn.views.drawing import max_pool, value_range

LONG_TOKENS = 2048  # longer examples are embedded as pooled maps and bands
LONG_FROM, LONG_MAP_BYTES = 512, 64 << 20  # and longer ones whose maps are over 64 MiB
POOL = 256  # the long maps' pooled size (the model view's enlarged map: 2 px a block)
RADIUS = 64  # the head view's window: this many tokens either side of its centre
BAND = 2 * RADIUS  # |i - j| <= BAND: every pair of a window of 2 RADIUS + 1 tokens


def is_long(cap: Capture) -> bool:
    """Whether the page embeds `cap` as pooled maps and bands: over `LONG_TOKENS` tokens,
    or over `LONG_FROM` tokens with maps of over `LONG_MAP_BYTES` (a byte a weight: the
    layers x heads x T² of a base-size model past ~700 tokens)."""
    t = cap.length
    maps = len(cap.layers) * len(cap.heads) * t * t
    return t > LONG_TOKENS or (t > LONG_FROM and maps > LONG_MAP_BYTES)


def window_size(t: int, radius: int = RADIUS) -> int:
    """How many tokens a head-view window of a `t`-token text shows."""
    return min(t, 2 * radius + 1)


def token_window(center: int, t: int, radius: int = RADIUS) -> tuple[int, int]:
    """[start, stop) of the head view's window around token `center` of a `t`-token
    text: `radius` tokens either side, shifted inside the text at its ends (always
    `window_size(t)` tokens). head.js's `around` is the same rule."""
    if not 0 <= center < t:
        raise UsageError(f"token {center} is out of range: the text has {t} tokens")
    n = window_size(t, radius)
    lo = min(max(0, center - radius), t - n)
    return lo, lo + n


def head_map(cap: Capture, kind: str, layer: int, head: int, rows=slice(None)) -> np.ndarray:
    """[t, T] float32 weights of one layer and head (indices into the capture's axes), the
    query rows `rows` (a slice), as `payload.view_weights` gives them: a decoder's zero
    for j > i, ‖αf‖ rows normalised over the keys each row sees."""
    k = KINDS[kind]
    raw, scale, offset = cap.encoded(k.quantity)
    raw = raw[layer, head, rows]
    if raw.dtype == np.uint8:  # `dequantize`'s float32 operations, in place
        x = raw.astype(np.float32)
        x *= np.float32(scale)
        x += np.float32(offset)
    else:
        x = np.array(dequantize(raw), np.float32)
    if is_causal(cap):
        start = range(cap.length)[rows].start if x.shape[0] else 0
        for r in range(x.shape[0]):  # row by row: no [t, T] mask
            x[r, start + r + 1 :] = 0
    if k.normalised:
        total = x.sum(-1, keepdims=True, dtype=np.float64)
        x = np.where(total > 0, x / np.where(total > 0, total, 1), 0).astype(np.float32)
    return x


def band_offsets(causal: bool, band: int = BAND) -> tuple[int, int]:
    """(first, last) key offset j - i the band holds: -band .. band, a decoder's -band .. 0."""
    return -band, 0 if causal else band


def band(w: np.ndarray, first: int, last: int) -> np.ndarray:
    """[T, T] -> [T, last - first + 1]: out[i, d] = w[i, i + first + d], 0 outside the map."""
    t = w.shape[0]
    out = np.zeros((t, last - first + 1), w.dtype)
    for d, off in enumerate(range(first, last + 1)):
        diag = np.diagonal(w, off)  # w[i, i + off] for the rows where the key exists
        lo = max(0, -off)
        out[lo : lo + len(diag), d] = diag
    return out


def long_arrays(cap: Capture, kind: str, causal: bool, visit=None) -> dict[str, np.ndarray]:
    """One weight kind's arrays, float32: "band" [L, H, T, W], "pooled" [L, H, POOL, POOL]
    and "first" [L, H, T], each query's weight on the first token (the sink, which a
    window away from the start does not show); `visit(layer, head, w)` (indices, the
    [T, T] map) is called on each head's map too."""
    first, last = band_offsets(causal)
    n_l, n_h, t = len(cap.layers), len(cap.heads), cap.length
    out = dict(
        band=np.zeros((n_l, n_h, t, last - first + 1), np.float32),
        pooled=np.zeros((n_l, n_h, POOL, POOL), np.float32),
        first=np.zeros((n_l, n_h, t), np.float32),
    )
    for li in range(n_l):
        for hi in range(n_h):
            w = head_map(cap, kind, li, hi)
            if visit is not None:
                visit(li, hi, w)
            out["band"][li, hi] = band(w, first, last)
            out["pooled"][li, hi] = max_pool(w, POOL)
            out["first"][li, hi] = w[:, 0]
    return out


def pooled_maps(cap, kind: str, res: int, causal: bool) -> tuple[np.ndarray, float, float]:
    """([L, H, res, res] maps max-pooled over the cells a query sees, -inf where a pooled
    block has none; the colour scale [lo, hi] of those cells), one head at a time: the
    static model view's (`svg.model_svg`)."""
    out = np.zeros((len(cap.layers), len(cap.heads), res, res), np.float32)
    low, high = np.inf, -np.inf
    for li in range(len(cap.layers)):
        for hi in range(len(cap.heads)):
            m = head_map(cap, kind, li, hi)  # a decoder's j > i are 0: never a min or a max
            low, high = min(low, float(m.min())), max(high, float(m.max()))
            if causal:
                for r in range(len(m)):
                    m[r, r + 1 :] = -np.inf
            out[li, hi] = max_pool(m, res) if res < len(m) else m
    lo, hi = value_range([low, high])
    return out, lo, hi
