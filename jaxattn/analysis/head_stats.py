"""Per-head attention statistics averaged over a corpus (Clark et al. 2019, sections 3-3.3).

For one example with weights W [L, H, T, T] (attention, or norm-based weights:
see `jaxattn.analysis.weights`) and query rows i = 0..T-1:

| stat | per example: mean over the T rows i of |
|---|---|
| cls | sum_{j: token j is cls} W[i, j] |
| sep | sum_{j: token j is sep} W[i, j] (every separator of a pair) |
| punct | sum_{j: token j is "." or ","} W[i, j] |
| self | W[i, i] |
| prev | W[i, i-1] (0 for i = 0) |
| next | W[i, i+1] (0 for i = T-1) |
| entropy | -sum_j W[i, j] ln W[i, j] (nats; 0 ln 0 = 0) |
| entropy_cls | the same for the [CLS] row only (mean over cls rows) |

All rows count, special-token rows included, as in Clark et al.'s code. The
corpus value is the mean of the per-example values over the examples (each
example weighs the same, again as Clark et al.; `entropy_cls` over the examples
that have a [CLS]).

The engine computes the same table on the device (the `head_stats` and
`norm_head_stats` quantities, [L, H, 8] per example): `HeadStats` takes those
when a capture holds them, so a corpus is analysed without copying its maps.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from jaxattn.analysis.tokens import SpecialTokens, detect_specials, token_masks
from jaxattn.analysis.weights import (
    WEIGHT_KINDS,
    available_kinds,
    capture_weights,
    check_layout,
)
from jaxattn.capture import Capture
from jaxattn.quantities import HEAD_STATS


def row_entropy(weights: np.ndarray) -> np.ndarray:
    """-sum_j w_j ln w_j over the last axis, in nats, with 0 ln 0 = 0."""
    w = np.asarray(weights, np.float64)
    logs = np.log(w, out=np.zeros_like(w), where=w > 0)
    return -(w * logs).sum(-1)


def head_statistics(
    weights: np.ndarray, tokens: Sequence[str], specials: SpecialTokens | None = None
) -> dict[str, np.ndarray]:
    """The statistics of the module table for one example (Clark et al. 2019).

    Args:
      weights: [L, H, T, T] attention or norm-based weights.
      tokens: the T token strings.
      specials: the special-token strings; detected from `tokens` when None.

    Returns:
      stat -> [L, H] float64, for every name in `HEAD_STATS`; ``entropy_cls`` is
      NaN when no token is the cls token.
    """
    w = np.asarray(weights, np.float64)
    t = w.shape[-1]
    if len(tokens) != t:
        raise ValueError(f"{len(tokens)} tokens for weights over {t} positions")
    masks = token_masks(tokens, specials or detect_specials(tokens))
    entropy = row_entropy(w)  # [L, H, T]
    out = {name: w[..., masks[name]].sum(-1).mean(-1) for name in ("cls", "sep", "punct")}
    out["self"] = np.diagonal(w, 0, -2, -1).mean(-1)
    out["prev"] = np.diagonal(w, -1, -2, -1).sum(-1) / t  # W[i, i-1], i >= 1
    out["next"] = np.diagonal(w, 1, -2, -1).sum(-1) / t  # W[i, i+1], i <= T-2
    out["entropy"] = entropy.mean(-1)
    if masks["cls"].any():
        out["entropy_cls"] = entropy[..., masks["cls"]].mean(-1)
    else:
        out["entropy_cls"] = np.full(w.shape[:-2], np.nan)
    return {name: out[name] for name in HEAD_STATS}


# weight kind -> the quantity holding its statistics computed on the device
ON_DEVICE = {"attention": "head_stats", "norm": "norm_head_stats"}


def stats_kinds(capture: Capture) -> tuple[str, ...]:
    """The weight kinds a capture has statistics for: its maps, or the on-device statistics."""
    return tuple(k for k in WEIGHT_KINDS
                 if k in available_kinds(capture) or ON_DEVICE[k] in capture.tensors)  # fmt: skip


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

    def update(self, capture: Capture) -> None:
        """Add one example."""
        self.layout = check_layout(self.layout, capture)
        kinds = self.kinds if self.kinds is not None else stats_kinds(capture)
        for kind in kinds:
            on_device = ON_DEVICE[kind] in capture.tensors
            if on_device and self.specials is None:
                table = np.asarray(capture.array(ON_DEVICE[kind]), np.float64)  # [L, H, N]
                stats = {name: table[..., k] for k, name in enumerate(HEAD_STATS)}
            elif on_device and kind not in available_kinds(capture):
                raise ValueError(
                    f"{ON_DEVICE[kind]} was computed with the detected special tokens; "
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

    @property
    def examples(self) -> int:
        """How many examples the attention (else first) kind has seen."""
        counts = self._counts.get("attention") or next(iter(self._counts.values()), {})
        return counts.get("cls", 0)

    def result(self) -> dict[str, np.ndarray]:
        """Corpus means: ``{stat: [L, H]}`` for attention weights and ``{"norm_" + stat: ...}``.

        A stat no example had (``entropy_cls`` without [CLS]) is left out.
        """
        out = {}
        for kind in WEIGHT_KINDS:
            prefix = "" if kind == "attention" else f"{kind}_"
            for name in HEAD_STATS:
                n = self._counts.get(kind, {}).get(name, 0)
                if n:
                    out[prefix + name] = self._sums[kind][name] / n
        return out
