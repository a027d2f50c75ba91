"""The two kinds of attention weights every analysis can run on.

- ``"attention"``: the attention weights alpha^h_ij of the capture's
  ``attention`` quantity, as they are (rows sum to 1).
- ``"norm"``: norm-based weights (Kobayashi et al. 2020):
  ``||alpha^h_ij f_h(x_j)||`` from the ``alpha_fx_norm`` quantity with each row
  divided by its sum, so they are distributions over keys like attention and
  every statistic is comparable. A head that puts much attention on a token whose
  transformed vector f_h(x_j) is small (Kobayashi's [SEP] finding) gets a small
  norm-based weight there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from jaxattn.capture import Capture, one_capture
from jaxattn.errors import UsageError


@dataclasses.dataclass(frozen=True)
class WeightKind:
    """One kind of weights: where a capture holds it, and how it is shown.

    Attributes:
      quantity: the capture quantity the weights are computed from.
      normalised: each row is divided by its sum (the norm-based weights).
      on_device: the quantity holding its head statistics computed on the device.
      title: how a view titles it.
    """

    quantity: str
    normalised: bool
    on_device: str
    title: str


# The one table of weight kinds; analyses, head statistics and views read it.
KINDS: dict[str, WeightKind] = {
    "attention": WeightKind("attention", False, "head_stats", "attention α"),
    "norm": WeightKind("alpha_fx_norm", True, "norm_head_stats", "‖αf(x)‖ rows normalised"),
}

# kind -> the capture quantity it is computed from
WEIGHT_KINDS: dict[str, str] = {kind: k.quantity for kind, k in KINDS.items()}


def normalise_rows(x: np.ndarray) -> np.ndarray:
    """x / x.sum(-1) in float64; all-zero rows stay zero."""
    x = np.asarray(x, np.float64)
    s = x.sum(-1, keepdims=True)
    return np.divide(x, s, out=np.zeros_like(x), where=s > 0)


def square_maps(weights) -> np.ndarray:
    """`weights` as float64 [..., T, T] maps, as the analyses of one example's arrays
    take them (a Capture: its attention).

    Raises:
      UsageError: no array of numbers, or maps that are not square (a capture's rows
        or keys selected with query_positions or key_positions).
    """
    if isinstance(weights, Capture):
        weights.check_full_maps("an analysis of attention weights")
        weights = weights.attention
    try:
        w = np.asarray(weights, np.float64)
    except (TypeError, ValueError):
        raise UsageError(
            f"weights must be an array of [..., T, T] maps, got {type(weights).__name__}"
        ) from None
    if w.ndim < 2 or w.shape[-1] != w.shape[-2]:
        rows = (
            " (a capture of selected query rows or keys holds parts of maps: capture "
            "without query/key positions)"
        )
        raise UsageError(
            f"weights must be [..., T, T] maps, got shape {w.shape}{rows if w.ndim >= 2 else ''}"
        )
    return w


def token_maps(weights, tokens: Sequence[str]) -> np.ndarray:
    """`square_maps` over the T `tokens`.

    Raises:
      UsageError: as `square_maps`, or a count of tokens other than T.
    """
    w = square_maps(weights)
    if len(tokens) != w.shape[-1]:
        raise UsageError(f"{len(tokens)} tokens for weights over {w.shape[-1]} positions")
    return w


def available_kinds(capture: Capture) -> tuple[str, ...]:
    """The weight kinds a capture holds the quantities for, in `WEIGHT_KINDS` order."""
    return tuple(k for k, q in WEIGHT_KINDS.items() if q in capture.tensors)


def capture_weights(capture: Capture, kind: str = "attention") -> np.ndarray:
    """The [L, H, T, T] float64 weights of one kind (see the module docstring).

    Raises:
      UsageError: an unknown kind, the capture lacks its quantity, or its maps hold
        selected rows or keys (`Capture.check_full_maps`).
    """
    if kind not in WEIGHT_KINDS:
        raise UsageError(f"unknown weight kind {kind!r}; expected one of {', '.join(WEIGHT_KINDS)}")
    name = WEIGHT_KINDS[kind]
    if name not in capture.tensors:
        raise UsageError(
            f"{kind!r} weights need the {name!r} quantity; the capture holds "
            f"{', '.join(capture.tensors)} (capture with what=(..., {name!r}))"
        )
    capture.check_full_maps("an analysis of attention weights")
    x = capture.array(name)
    return normalise_rows(x) if KINDS[kind].normalised else np.asarray(x, np.float64)


def check_layout(
    layout: tuple[tuple[int, ...], tuple[int, ...]] | None, capture: Capture
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The (layers, heads) of a corpus: the first capture's; later ones must match.

    Raises:
      UsageError: no Capture, or one with other layers or heads than the first.
    """
    one_capture(capture, "an analysis's update")
    mine = (tuple(capture.layers), tuple(capture.heads))
    if layout is not None and mine != layout:
        raise UsageError(
            f"captures of one corpus must hold the same layers and heads: got {mine}, "
            f"expected {layout}"
        )
    return mine


def first_row(capture: Capture, causal: bool | None) -> int:
    """The first query row a corpus mean over rows takes of `capture`: 1 for a causal
    model's (its row 0 sees only itself: the same in every head and model, a mixing
    ratio of 0), else 0. `causal`: the caller's say, or None: the capture's provenance
    (`jaxattn.info.provenance`: "causal"; a capture that does not say is an encoder's)."""
    if causal is None:
        causal = bool(capture.provenance.get("causal", False))
    return 1 if causal else 0
