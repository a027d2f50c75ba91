"""The stats-first page's numbers: per-head statistics along the text, per segment.

For each layer and head (and weight kind: α, and ‖αf‖ rows normalised), the
statistics of `SEGMENT_STATS` of each query row i (i >= 1: row 0 has no previous
token, and a decoder's row 0 sees only itself):

- ``sink``: the weight on the first token, w[i, 0] (the attention sink, Xiao et
  al. 2023; an encoder's first token is its [CLS]);
- ``prev``: the weight on the previous token, w[i, i - 1];
- ``local``: the weight on the keys within `local` tokens, |i - j| <= local (a
  decoder's: i - local <= j <= i), the first token left out (it is the sink's);
- ``entropy``: the row's entropy in nats, smoothed as Clark et al.'s code does,
  (1 - s) w + s / n over the n keys the row sees (T; a decoder's row i: i + 1),
  s = `jaxattn.quantities.ENTROPY_SMOOTHING`, as the engine's statistics.

and their means over the rows of each SEGMENT of `segment` tokens (segment k:
positions k·segment .. (k+1)·segment - 1) and over the whole text. The whole-text
means are the engine's ``decoder_head_stats`` first, prev and entropy for a
decoder (the same rows, the same smoothing).

Where a head's map is captured, the per-row numbers come from it. A head whose map
no capture holds takes sink, prev and entropy per row from the captured per-row
statistics (`ROW_SOURCES`: ``decoder_row_head_stats``' first, prev and a decoder's
entropy, ``row_head_stats``' prev and an encoder's entropy; the same definitions
and smoothing, computed on the device, blockwise on a long text, [L, H, T, P] not
[L, H, T, T]), so it has segments too; ``local`` has no such source (the engine
computes no windowed share: it needs the map) and stays empty. Without those, its
whole-text values come from the whole-text statistics (`STATISTIC_SOURCES`) and it
has no segments. Maps are read one head at a time (`long_maps.head_map`), the
entropy `ROW_CHUNK` rows at a time, so a long text needs no [L, H, T, T] array.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxattn.analysis.weights import KINDS
from jaxattn.capture import Capture, capture_list
from jaxattn.errors import UsageError
from jaxattn.quantities import DECODER_HEAD_STATS, ENTROPY_SMOOTHING, HEAD_STATS
from jaxattn.views.causal import is_causal
from jaxattn.views.long_maps import head_map

FORMAT = "jaxattn.views.segments/1"
SEGMENT_STATS = ("sink", "prev", "local", "entropy")
SEGMENT = 64  # tokens a segment (the default)
LOCAL = 8  # the local share's window: keys within this many tokens (the default)
MAX_SEGMENTS = 1024  # a text is cut into at most this many segments
ROW_CHUNK = 512  # rows a step of the entropy

# Where a head without a map gets its whole-text values: stat -> [(quantity, column,
# whether the capture must be causal)], in order of preference. head_stats' prev is
# a sum over rows 1 .. n-1 divided by n (`jaxattn.analysis.head_stats`): rescaled by
# n / (n - 1) to the mean over those rows. An encoder's entropy from head_stats is a
# mean over every row, row 0 included; a decoder's from decoder_head_stats is exact.
STATISTIC_SOURCES = {
    "sink": (("decoder_head_stats", "first", None),),
    "prev": (("decoder_head_stats", "prev", None), ("head_stats", "prev", None)),
    "entropy": (("decoder_head_stats", "entropy", True), ("head_stats", "entropy", False)),
}
# Where a head without a map gets its statistics per row (the same form): row i's
# value is `row_statistics`' (rows 1 .. T-1; row 0 is left out of every mean).
ROW_SOURCES = {
    "sink": (("decoder_row_head_stats", "first", None),),
    "prev": (("decoder_row_head_stats", "prev", None), ("row_head_stats", "prev", None)),
    # decoder_row_head_stats' entropy is either model's (an encoder's row over every real
    # key, as row_head_stats'): one capture serves the page (`statistics_captures`)
    "entropy": (
        ("decoder_row_head_stats", "entropy", None),
        ("row_head_stats", "entropy", False),
    ),
}
NORM_SOURCES = {
    "decoder_head_stats": "decoder_norm_head_stats",
    "head_stats": "norm_head_stats",
    "decoder_row_head_stats": "decoder_norm_row_head_stats",
    "row_head_stats": "norm_row_head_stats",
}


def check_segmenting(t: int, segment: int, local: int) -> None:
    """UsageError naming the bad setting: a segment or window under 1, too many segments."""
    if segment < 1:
        raise UsageError(f"segment {segment}: a segment holds at least 1 token")
    if local < 1:
        raise UsageError(f"local window {local}: give at least 1 token")
    if -(-t // segment) > MAX_SEGMENTS:
        least = -(-t // MAX_SEGMENTS)
        raise UsageError(
            f"segment {segment} cuts {t} tokens into over {MAX_SEGMENTS} segments: "
            f"give a segment of at least {least} tokens"
        )


def row_statistics(w: np.ndarray, causal: bool, local: int = LOCAL) -> dict[str, np.ndarray]:
    """[T, T] weights of one head -> stat -> [T] float64, each row's statistic of
    `SEGMENT_STATS` (the module docstring; row 0's prev is NaN)."""
    t = w.shape[0]
    out = {"sink": w[:, 0].astype(np.float64), "prev": np.full(t, np.nan)}
    out["prev"][1:] = np.diagonal(w, -1)
    near = np.zeros(t)
    for off in range(-local, 1 if causal else local + 1):
        diag = np.diagonal(w, off).astype(np.float64)
        lo = max(0, -off)
        keys = np.arange(lo, lo + len(diag)) + off
        near[lo : lo + len(diag)] += np.where(keys >= 1, diag, 0.0)
    out["local"] = near
    s, entropy = ENTROPY_SMOOTHING, np.zeros(t)
    for a in range(0, t, ROW_CHUNK):  # float32 terms, float64 sums
        x = np.asarray(w[a : a + ROW_CHUNK], np.float32)
        i = np.arange(a, a + len(x), dtype=np.float32)[:, None]
        p = (1.0 - s) * x + (s / (i + 1.0) if causal else np.float32(s / t))
        p = p.astype(np.float32, copy=False)
        terms = p * np.log(p)
        if causal:  # a decoder's row i sees keys j <= i only
            terms[np.arange(t)[None, :] > np.arange(a, a + len(x))[:, None]] = 0
        entropy[a : a + len(x)] = -terms.sum(-1, dtype=np.float64)
    out["entropy"] = entropy
    return out


def segment_means(per_row: np.ndarray, segment: int) -> np.ndarray:
    """[T] -> [S]: the mean of rows 1 .. T-1 in each segment of `segment` positions
    (NaN for a segment with no such row: only segment 0 of a 1-token segment)."""
    t = len(per_row)
    x = np.asarray(per_row, np.float64).copy()
    rows = np.arange(t) >= 1
    x[~rows] = 0.0
    edges = np.arange(0, t, segment)
    sums, counts = np.add.reduceat(x, edges), np.add.reduceat(rows.astype(float), edges)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def whole_mean(per_row: np.ndarray) -> float:
    """The mean of rows 1 .. T-1 (NaN for a 1-token text)."""
    return float(np.mean(per_row[1:])) if len(per_row) > 1 else float("nan")


def _held(cap: Capture, kind: str, stat: str, causal: bool, sources: dict):
    """(source quantity, the name `cap` holds it under for weight `kind`, column index)
    of the first of `sources`[stat] it holds, or (None, None, None)."""
    for quantity, column, needs_causal in sources.get(stat, ()):
        name = quantity if kind == "attention" else NORM_SOURCES[quantity]
        if name in cap.tensors and needs_causal in (None, causal):
            names = DECODER_HEAD_STATS if quantity.startswith("decoder") else HEAD_STATS
            return quantity, name, names.index(column)
    return None, None, None


def statistic_rows(cap: Capture, kind: str, stat: str, li: int, hi: int, causal: bool):
    """Each row's `stat` [T] float64 from the per-row statistics `cap` holds
    (`ROW_SOURCES`), with the quantity it came from; (None, None) when none gives it."""
    _, name, column = _held(cap, kind, stat, causal, ROW_SOURCES)
    if name is None:
        return None, None
    return np.asarray(cap.array(name)[li, hi, :, column], np.float64), name


def statistic_value(cap: Capture, kind: str, stat: str, li: int, hi: int, causal: bool):
    """A whole-text value of `stat` from the statistics `cap` holds (`STATISTIC_SOURCES`),
    with the quantity it came from; (None, None) when it holds none that gives it."""
    quantity, name, column = _held(cap, kind, stat, causal, STATISTIC_SOURCES)
    if name is not None:
        v = float(cap.array(name)[li, hi, column])
        if quantity == "head_stats" and stat == "prev":
            v = v * cap.length / (cap.length - 1) if cap.length > 1 else float("nan")
        return v, name
    return None, None


def _number(v) -> float | None:  # 6 significant digits; NaN (no row) as None
    return None if v is None or not np.isfinite(v) else float(f"{v:.6g}")


def _check_same_text(caps: Sequence[Capture]) -> None:
    for cap in caps[1:]:
        if cap.tokens != caps[0].tokens:
            raise UsageError(
                "the captures of one stats-first example must be of the same text: "
                f"{caps[0].length} and {cap.length} tokens differ"
            )


def segments_document(
    captures: Capture | Sequence[Capture],
    *,
    segment: int = SEGMENT,
    local: int = LOCAL,
    rows: dict | None = None,
) -> dict:
    """The stats-first document of one text from one or more captures of it.

    Each layer and head of any capture is a row of the document: from a capture that
    holds its map (``attention``; ``alpha_fx_norm`` for the norm kind), its segment
    and whole-text means; else from a capture's per-row statistics (`ROW_SOURCES`) the
    segment and whole-text means of sink, prev and entropy (local: none); else from
    its whole-text statistics, its whole-text values only.

    Returns ``{"format", "segment", "local", "T", "causal", "stats": SEGMENT_STATS,
    "bounds": [[start, stop], ...] of the segments, "layers", "heads",
    "kinds": {kind: {"source": [L][H] "maps" | quantity | null,
    "segments": {stat: [L][H] -> [S] numbers or null},
    "whole": {stat: [L][H] number or null}}}}`` (NaN as null).

    `rows` may hold (kind, layer, head) -> `row_statistics` of heads already computed
    (numbers of the model: the page computes them with the long maps, one pass a head).

    Raises:
      UsageError: no capture, captures of different texts, a bad segment or window.
      UsageError: a capture whose maps hold selected query rows or keys.
    """
    caps = capture_list(captures, "the stats-first page")
    if not caps:
        raise UsageError("no capture to view")
    _check_same_text(caps)
    for cap in caps:
        cap.check_full_maps("the stats-first page")
    t = caps[0].length
    check_segmenting(t, segment, local)
    causal = any(is_causal(c) for c in caps)
    layers = sorted({v for c in caps for v in c.layers})
    heads = sorted({v for c in caps for v in c.heads})
    kinds = {}
    for kind, k in KINDS.items():
        grid = _kind_grid(caps, kind, k.quantity, (layers, heads), segment, local, causal, rows)
        if grid is not None:
            kinds[kind] = grid
    if not kinds:
        raise UsageError(
            "the stats-first page needs attention maps or head statistics "
            "(what=('attention',), ('decoder_row_head_stats', 'row_head_stats') or "
            "('decoder_head_stats', 'head_stats'))"
        )
    bounds = [[a, min(a + segment, t)] for a in range(0, t, segment)]
    return dict(
        format=FORMAT,
        segment=segment,
        local=local,
        T=t,
        causal=causal,
        stats=list(SEGMENT_STATS),
        bounds=bounds,
        layers=layers,
        heads=heads,
        kinds=kinds,
    )


def _kind_grid(caps, kind, quantity, grid, segment, local, causal, rows) -> dict | None:
    """One weight kind's entry of the document, or None when no capture gives any of it."""
    layers, heads = grid
    source = [[None] * len(heads) for _ in layers]
    segs = {s: [[None] * len(heads) for _ in layers] for s in SEGMENT_STATS}
    whole = {s: [[None] * len(heads) for _ in layers] for s in SEGMENT_STATS}
    for li, layer in enumerate(layers):
        for hi, head in enumerate(heads):
            holders = [c for c in caps if layer in c.layers and head in c.heads]
            mapped = next((c for c in holders if quantity in c.tensors), None)
            if mapped is not None:
                per_head = (rows or {}).get((kind, layer, head))
                if per_head is None:
                    a, b = mapped.layers.index(layer), mapped.heads.index(head)
                    per_head = row_statistics(head_map(mapped, kind, a, b), causal, local)
                for stat, per_row in per_head.items():
                    segs[stat][li][hi] = [_number(v) for v in segment_means(per_row, segment)]
                    whole[stat][li][hi] = _number(whole_mean(per_row))
                source[li][hi] = "maps"
                continue
            per_row = {}  # stat -> [T] from the per-row statistics
            for cap in holders:
                a, b = cap.layers.index(layer), cap.heads.index(head)
                for stat in SEGMENT_STATS:
                    got, name = statistic_rows(cap, kind, stat, a, b, causal)
                    if name is not None and stat not in per_row:
                        per_row[stat] = got
                        segs[stat][li][hi] = [_number(v) for v in segment_means(got, segment)]
                        whole[stat][li][hi] = _number(whole_mean(got))
                        source[li][hi] = source[li][hi] or name
            for cap in holders:
                a, b = cap.layers.index(layer), cap.heads.index(head)
                for stat in SEGMENT_STATS:
                    if stat in per_row:
                        continue
                    v, name = statistic_value(cap, kind, stat, a, b, causal)
                    if name is not None and whole[stat][li][hi] is None:
                        whole[stat][li][hi] = _number(v)
                        source[li][hi] = source[li][hi] or name
    if all(s is None for row in source for s in row):
        return None
    return dict(source=source, segments=segs, whole=whole)
