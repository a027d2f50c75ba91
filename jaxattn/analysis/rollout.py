"""Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers").

For layers l = 0..L-1 with weights W_l [H, T, T]:

    A_l   = mean over heads h of W_l[h]                 # [T, T]
    A'_l  = 0.5 * A_l + 0.5 * I                         # the residual connection
    A'_l  = A'_l / A'_l.sum(-1, keepdims=True)          # rows renormalised
    R_0   = A'_0
    R_l   = A'_l @ R_{l-1}                              # product from layer 0 up

R_l[i, j] is how much of position i's representation after layer l traces back
to input token j. This is the authors' recursion (samiraabnar/attention_flow,
``compute_joint_attention`` with ``add_residual=True``: heads summed and divided
by H, I added, rows renormalised, then ``joint[i] = aug[i] @ joint[i-1]``).
Adding I and renormalising equals 0.5 A + 0.5 I renormalised, the form here.

With raw attention weights (rows already sum to 1) the renormalisation changes
nothing. With norm-based weights (``alpha_fx_norm``, each head's rows
normalised to sum 1 first, see `jaxattn.analysis.weights`), the same recursion
gives a norm-based rollout: jaxattn's extension, not the authors'.
"""

from __future__ import annotations

import numbers

import numpy as np

from jaxattn.analysis.head_stats import row_entropy
from jaxattn.analysis.tokens import SpecialTokens, detect_specials, token_masks
from jaxattn.analysis.weights import (
    available_kinds,
    capture_weights,
    check_layout,
    normalise_rows,
    square_maps,
)
from jaxattn.capture import Capture, one_capture
from jaxattn.errors import UsageError

RESIDUAL = 0.5  # Abnar & Zuidema's weight of the identity (residual) term


def residual_attention(weights: np.ndarray, residual: float = RESIDUAL) -> np.ndarray:
    """A'_l of every layer: the head mean plus the residual, rows renormalised.

    Args:
      weights: [L, H, T, T] row-stochastic weights (attention, or row-normalised
        norm-based weights).
      residual: weight of the identity term (0.5 in the paper).

    Returns:
      [L, T, T] float64; every row sums to 1. These are also the capacities of
      the attention graph of `jaxattn.analysis.flow`.

    Raises:
      UsageError: weights that are not [L, H, T, T] maps (selected query rows gave a
        [L, T, T] result by broadcasting, [H, T, T] a numpy error), or a residual
        that is no number.
    """
    w = square_maps(weights)
    if w.ndim != 4:
        raise UsageError(f"weights must be [L, H, T, T] maps, got shape {w.shape}")
    if isinstance(residual, bool) or not isinstance(residual, numbers.Real):
        raise UsageError(f"residual must be a number (0.5 in the paper), got {residual!r}")
    eye = np.eye(w.shape[-1])
    return normalise_rows((1.0 - residual) * w.mean(1) + residual * eye)


def attention_rollout(weights: np.ndarray, residual: float = RESIDUAL) -> np.ndarray:
    """Rollout of every layer, by the recursion of the module docstring.

    Args:
      weights: [L, H, T, T] row-stochastic weights of consecutive layers from
        the first (attention, or row-normalised norm-based weights).
      residual: weight of the identity term (0.5 in the paper).

    Returns:
      [L, T, T] float64: R_l for each layer; every row sums to 1.

    Raises:
      UsageError: as `residual_attention`.
    """
    aug = residual_attention(weights, residual)
    out = np.empty_like(aug)
    rolled = np.eye(aug.shape[-1])
    for layer in range(aug.shape[0]):
        rolled = aug[layer] @ rolled
        out[layer] = rolled
    return out


def from_input(capture: Capture) -> bool:
    """Whether the capture holds layers 0..L-1, where rollout and flow start."""
    return tuple(capture.layers) == tuple(range(len(capture.layers)))


def check_from_input(capture: Capture, what: str = "rollout") -> None:
    """Rollout and flow start at the input: the capture must hold layers 0..L-1.

    Raises:
      UsageError: it holds other layers.
    """
    if not from_input(one_capture(capture, what)):
        raise UsageError(
            f"{what} needs consecutive layers from 0; the capture holds {list(capture.layers)}"
        )


def rollout(capture: Capture, kind: str = "attention", residual: float = RESIDUAL) -> np.ndarray:
    """`attention_rollout` of one capture's weights of `kind` ("attention" or "norm").

    The head mean is over the captured heads: capture all heads for the paper's
    definition.

    Raises:
      UsageError: the capture's layers are not 0, 1, ..., L-1 (rollout starts at
        the input), or it lacks the quantity of `kind`.
    """
    check_from_input(capture)
    return attention_rollout(capture_weights(capture, kind), residual)


class RolloutStats:
    """Per-layer summary of rollout over a corpus, per weight kind.

    For each layer l, the mean over examples of the mean over rows i of:
    ``R_l[i, i]`` ("self": the token's own input), the mass on [CLS] ("cls")
    and on [SEP] ("sep") inputs, and the row entropy in nats ("entropy").

    Args:
      kinds: weight kinds to roll out; those the capture holds are used.
      specials: special-token strings; detected per example when None.

    Raises (from ``update``):
      UsageError: a capture whose layers are not 0..L-1 (see `rollout`).
    """

    STATS = ("self", "cls", "sep", "entropy")

    def __init__(
        self, kinds: tuple[str, ...] = ("attention", "norm"), specials: SpecialTokens | None = None
    ):
        self.kinds, self.specials = kinds, specials
        self.layout: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        self._sums: dict[str, dict[str, np.ndarray]] = {}
        self._n: dict[str, int] = {}

    def matrices(self, capture: Capture, kind: str) -> np.ndarray:
        """The [L, T, T] provenance matrices summarised: rollout here."""
        return rollout(capture, kind)

    def update(self, capture: Capture) -> None:
        """Add one example."""
        self.layout = check_layout(self.layout, capture)
        masks = token_masks(capture.tokens, self.specials or detect_specials(capture.tokens))
        for kind in self.kinds:
            if kind not in available_kinds(capture):
                continue
            r = self.matrices(capture, kind)
            stats = {
                "self": np.diagonal(r, 0, -2, -1).mean(-1),
                "cls": r[..., masks["cls"]].sum(-1).mean(-1),
                "sep": r[..., masks["sep"]].sum(-1).mean(-1),
                "entropy": row_entropy(r).mean(-1),
            }
            sums = self._sums.setdefault(kind, {})
            for name, v in stats.items():
                sums[name] = sums.get(name, 0.0) + v
            self._n[kind] = self._n.get(kind, 0) + 1

    def result(self) -> dict[str, dict[str, np.ndarray]]:
        """{kind: {stat: [L]}} for each kind seen."""
        return {
            kind: {name: s / self._n[kind] for name, s in sums.items()}
            for kind, sums in self._sums.items()
        }
