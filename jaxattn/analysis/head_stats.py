"""Per-head attention statistics averaged over a corpus (Clark et al. 2019, sections 3-3.3).

For one example with weights W [L, H, T, T] (attention, or norm-based weights:
see `jaxattn.analysis.weights`) and query rows i = 0..T-1:

| stat | per example |
|---|---|
| cls | mean over all rows i of sum_{j: token j is cls} W[i, j] |
| sep | mean over all rows i of sum_{j: token j is sep} W[i, j] (every separator) |
| punct | mean over all rows i of sum_{j: token j is "." or ","} W[i, j] |
| self | mean over all rows i of W[i, i] |
| prev | mean over all rows i of W[i, i-1] (0 for i = 0) |
| next | mean over all rows i of W[i, i+1] (0 for i = T-1) |
| entropy | mean over all rows i of -sum_j P[i, j] ln P[i, j] (nats) |
| entropy_cls | the same for the [CLS] row only (mean over cls rows) |
| sep_sep | mean over the sep rows of their attention to sep tokens ([SEP] -> [SEP]) |
| rest_sep | mean over the other rows of their attention to sep tokens (other -> [SEP]) |

Entropy is taken of the smoothed rows P = (1 - 1e-4) W + 1e-4 / T, as Clark
et al.'s code does (General_Analysis.ipynb, "smooth to avoid NaNs"). Their
code divides the sep_sep and rest_sep sums by 2 and T - 2, the number of
[SEP] and other rows in their two-segment inputs; here they are divided by the
number of sep rows and of other rows of each example, so a single sentence
(one [SEP]) is not halved. Either is NaN when the example has no such rows.
The reference line of their entropy plot, the entropy of uniform attention
(ln T, averaged over the examples), is `HeadStats.uniform_entropy`.

All rows count, special-token rows included, as in Clark et al.'s code. The
corpus value is the mean of the per-example values over the examples (each
example weighs the same, again as Clark et al.; a NaN stat over the examples
that have it).

The engine computes the same table on the device (the `head_stats` and
`norm_head_stats` quantities, [L, H, N] per example, N = len(HEAD_STATS)):
`HeadStats` takes those when a capture holds them, so a corpus is analysed
without copying its maps.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from jaxattn.analysis.tokens import SpecialTokens, detect_specials, token_masks
from jaxattn.analysis.weights import (
    KINDS,
    WEIGHT_KINDS,
    available_kinds,
    capture_weights,
    check_layout,
    token_maps,
)
from jaxattn.capture import Capture
from jaxattn.errors import CaptureFileError, UsageError
from jaxattn.quantities import ENTROPY_SMOOTHING, HEAD_STATS


def row_entropy(weights: np.ndarray, smoothing: float = 0.0) -> np.ndarray:
    """-sum_j p_j ln p_j over the last axis, in nats, with 0 ln 0 = 0.

    Args:
      weights: [..., T] rows.
      smoothing: s in p = (1 - s) w + s / T (Clark et al. use 1e-4,
        `ENTROPY_SMOOTHING`); 0 takes the rows as they are.
    """
    w = np.asarray(weights, np.float64)
    if smoothing:
        w = (1.0 - smoothing) * w + smoothing / w.shape[-1]
    logs = np.log(w, out=np.zeros_like(w), where=w > 0)
    return -(w * logs).sum(-1)


def _mean_over(per_row: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Mean of [..., T] over the rows where `rows` [T] is true; NaN where none is."""
    if not rows.any():
        return np.full(per_row.shape[:-1], np.nan)
    return per_row[..., rows].mean(-1)


def head_statistics(
    weights: np.ndarray, tokens: Sequence[str], specials: SpecialTokens | None = None
) -> dict[str, np.ndarray]:
    """The statistics of the module table for one example (Clark et al. 2019).

    Args:
      weights: [L, H, T, T] attention or norm-based weights.
      tokens: the T token strings.
      specials: the special-token strings; detected from `tokens` when None.

    Returns:
      stat -> [L, H] float64, for every name in `HEAD_STATS`; ``entropy_cls``,
      ``sep_sep`` and ``rest_sep`` are NaN when the example has no such row.
    Raises:
      UsageError: weights that are not [..., T, T] maps over the T tokens
        (`jaxattn.analysis.weights.token_maps`).
    """
    w = token_maps(weights, tokens)
    t = w.shape[-1]
    masks = token_masks(tokens, specials or detect_specials(tokens))
    entropy = row_entropy(w, ENTROPY_SMOOTHING)  # [L, H, T]
    out = {name: w[..., masks[name]].sum(-1).mean(-1) for name in ("cls", "sep", "punct")}
    out["self"] = np.diagonal(w, 0, -2, -1).mean(-1)
    out["prev"] = np.diagonal(w, -1, -2, -1).sum(-1) / t  # W[i, i-1], i >= 1
    out["next"] = np.diagonal(w, 1, -2, -1).sum(-1) / t  # W[i, i+1], i <= T-2
    out["entropy"] = entropy.mean(-1)
    out["entropy_cls"] = _mean_over(entropy, masks["cls"])
    to_sep = w[..., masks["sep"]].sum(-1)  # [L, H, T]
    out["sep_sep"] = _mean_over(to_sep, masks["sep"])
    out["rest_sep"] = _mean_over(to_sep, ~masks["sep"])
    return {name: out[name] for name in HEAD_STATS}


def stats_kinds(capture: Capture) -> tuple[str, ...]:
    """The weight kinds a capture has statistics for: its maps, or the on-device statistics."""
    return tuple(
        k
        for k in WEIGHT_KINDS
        if k in available_kinds(capture) or KINDS[k].on_device in capture.tensors
    )


class HeadStats:
    """Streams `head_statistics` over a corpus: ``update(capture)`` per example, then ``result()``.

    Both weight kinds are computed when the captures hold their quantities
    (``attention``; ``alpha_fx_norm`` for the norm-based ones; or the engine's
    ``head_stats`` / ``norm_head_stats``, taken as they are), unless `kinds`
    names which. Memory is O(L * H) whatever the corpus size.

    Args:
      specials: the special-token strings; detected per example when None.
      kinds: weight kinds to compute ("attention", "norm"); None = all available.
    """

    def __init__(self, specials: SpecialTokens | None = None, kinds: Iterable[str] | None = None):
        self.specials = specials
        self.kinds = tuple(kinds) if kinds is not None else None
        self.layout: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        self._sums: dict[str, dict[str, np.ndarray]] = {}
        self._counts: dict[str, dict[str, int]] = {}
        self._log_lengths = 0.0  # sum over the examples of ln T
        self._seen = 0

    def update(self, capture: Capture) -> None:
        """Add one example."""
        self.layout = check_layout(self.layout, capture)
        kinds = self.kinds if self.kinds is not None else stats_kinds(capture)
        for kind in kinds:
            stats_quantity = KINDS[kind].on_device
            on_device = stats_quantity in capture.tensors
            if on_device and self.specials is None:
                table = np.asarray(capture.array(stats_quantity), np.float64)  # [L, H, N]
                if table.shape[-1] != len(HEAD_STATS):
                    raise CaptureFileError(
                        f"{stats_quantity} holds {table.shape[-1]} statistics per head, this "
                        f"version {len(HEAD_STATS)} ({', '.join(HEAD_STATS)}): capture it again"
                    )
                stats = {name: table[..., k] for k, name in enumerate(HEAD_STATS)}
            elif on_device and kind not in available_kinds(capture):
                raise UsageError(
                    f"{stats_quantity} was computed with the detected special tokens; "
                    "custom specials need the maps (capture attention / alpha_fx_norm)"
                )
            else:
                weights = capture_weights(capture, kind)
                stats = head_statistics(weights, capture.tokens, self.specials)
            sums = self._sums.setdefault(kind, {})
            counts = self._counts.setdefault(kind, {})
            for name, value in stats.items():
                if np.isnan(value).any():
                    continue
                sums[name] = sums.get(name, 0.0) + value
                counts[name] = counts.get(name, 0) + 1
        self._log_lengths += math.log(capture.length)
        self._seen += 1

    @property
    def uniform_entropy(self) -> float:
        """The entropy of uniform attention, ln T, averaged over the examples (nats).

        Clark et al.'s reference line for the head entropies (General_Analysis.ipynb,
        ``uniform_attn_entropy``); NaN before any example.
        """
        return self._log_lengths / self._seen if self._seen else math.nan

    @property
    def examples(self) -> int:
        """How many examples the attention (else first) kind has seen."""
        counts = self._counts.get("attention") or next(iter(self._counts.values()), {})
        return counts.get("cls", 0)

    def result(self) -> dict[str, np.ndarray]:
        """Corpus means: ``{stat: [L, H]}`` for attention weights and ``{"norm_" + stat: ...}``.

        A stat no example had (``entropy_cls`` without [CLS], ``sep_sep``
        without [SEP]) is left out.
        """
        out = {}
        for kind in WEIGHT_KINDS:
            prefix = "" if kind == "attention" else f"{kind}_"
            for name in HEAD_STATS:
                n = self._counts.get(kind, {}).get(name, 0)
                if n:
                    out[prefix + name] = self._sums[kind][name] / n
        return out
