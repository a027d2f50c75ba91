"""Clark et al. 2019's per-head statistics, on the device (the head_stats quantities).

The same numbers as `jaxattn.analysis.head_statistics` computes on the host
from a trimmed [L, H, T, T] map, computed inside the jitted step from the
padded weights, so a corpus analysis copies [L, H, N] per example instead of
the maps. Padding: padded keys carry exactly zero weight and are left out of
the entropies' smoothing, padded query rows are left out of every mean. Token
classes come from `jaxattn.token_classes` (one definition for host and device),
packed as bits per token.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxattn.quantities import ENTROPY_SMOOTHING
from jaxattn.token_classes import CLS_BIT, PUNCT_BIT, SEP_BIT


def _mean_over(per_row, rows):
    """[H, T] -> [H]: the mean over the rows weighted 1 in `rows` [T]; NaN if none."""
    count = rows.sum()
    return jnp.where(count > 0, (per_row * rows).sum(-1) / jnp.maximum(count, 1.0), jnp.nan)


def _smoothed_entropy(weights, keys, visible):
    """[H, T]: each row's entropy in nats after Clark et al.'s smoothing
    (1 - s) w + s / keys over the keys `visible` [T, S] or [S] lets it see
    (`keys`: their count, a scalar or [T, 1]); the others stay 0."""
    s = ENTROPY_SMOOTHING
    smoothed = ((1.0 - s) * weights + s / keys) * visible
    logs = jnp.log(jnp.where(smoothed > 0, smoothed, 1.0))
    return -(smoothed * logs).sum(-1)


def head_statistics(weights, mask, classes):
    """weights [H, T, S] (T == S), mask [T] bool, classes [T] int8 bits -> [H, N].

    N follows `jaxattn.quantities.HEAD_STATS`: cls, sep, punct, self, prev,
    next, entropy and entropy_cls (nats, of rows smoothed by ENTROPY_SMOOTHING
    over the real keys; entropy_cls NaN without a cls token), sep_sep and
    rest_sep (NaN without such rows).
    """
    real = mask.astype(weights.dtype)  # [T]
    n = real.sum()

    def rows_of(bit):
        return ((classes & bit) != 0).astype(weights.dtype) * real  # [T]

    def attention_to(bit):  # [H, T]: each row's weight on the tokens of a class
        return (weights * rows_of(bit)).sum(-1)

    diag = jnp.diagonal(weights, 0, 1, 2)  # [H, T]
    below = jnp.diagonal(weights, -1, 1, 2)  # W[i, i-1] for i = 1..T-1
    above = jnp.diagonal(weights, 1, 1, 2)  # W[i, i+1] for i = 0..T-2 (past the end: 0)
    entropy = _smoothed_entropy(weights, n, real)  # [H, T]; padded keys stay 0
    to_sep = attention_to(SEP_BIT)
    sep_rows = rows_of(SEP_BIT)
    stats = (
        _mean_over(attention_to(CLS_BIT), real),
        _mean_over(to_sep, real),
        _mean_over(attention_to(PUNCT_BIT), real),
        _mean_over(diag, real),
        (below * real[1:]).sum(-1) / n,
        (above * real[:-1]).sum(-1) / n,
        _mean_over(entropy, real),
        _mean_over(entropy, rows_of(CLS_BIT)),
        _mean_over(to_sep, sep_rows),
        _mean_over(to_sep, real - sep_rows),
    )
    return jnp.stack(stats, axis=-1)


def normalise_rows(weights):
    """weights / their row sums; all-zero rows stay zero (`analysis.normalise_rows`)."""
    total = weights.sum(-1, keepdims=True)
    return jnp.where(total > 0, weights / jnp.where(total > 0, total, 1.0), 0.0)


def decoder_statistics(weights, mask, classes):
    """weights [H, T, S] (T == S), mask [T] bool, classes [T] int8 bits -> [H, P].

    P follows `jaxattn.quantities.DECODER_HEAD_STATS`: first, prev, self, punct
    and entropy (nats, row i smoothed by ENTROPY_SMOOTHING over the real keys
    j <= i it can see), each a mean over the real query rows 1 .. n-1 (NaN for
    an example of one token). The same numbers as
    `jaxattn.analysis.decoder_head_statistics` from a trimmed map.
    """
    t = weights.shape[-1]
    real = mask.astype(weights.dtype)  # [T]
    index = jnp.arange(t)
    rows = real * (index >= 1)  # query rows 1 .. n-1

    def mean(per_row):
        return _mean_over(per_row, rows)

    punct = ((classes & PUNCT_BIT) != 0).astype(weights.dtype) * real
    below = jnp.pad(jnp.diagonal(weights, -1, 1, 2), ((0, 0), (1, 0)))  # W[i, i-1]; row 0: 0
    visible = (index[None, :] <= index[:, None]) * real[None, :]  # [T, S]: j <= i, real
    entropy = _smoothed_entropy(weights, index[:, None] + 1.0, visible)  # row i: i+1 keys
    stats = (
        mean(weights[..., 0]),
        mean(below),
        mean(jnp.diagonal(weights, 0, 1, 2)),
        mean((weights * punct).sum(-1)),
        mean(entropy),
    )
    return jnp.stack(stats, axis=-1)
