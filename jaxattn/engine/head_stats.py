"""Clark et al. 2019's per-head statistics, on the device (the head_stats quantities).

The same numbers as `jaxattn.analysis.head_statistics` computes on the host
from a trimmed [L, H, T, T] map, computed inside the jitted step from the
padded weights, so a corpus analysis copies [L, H, 8] per example instead of
the maps. Padding: padded keys carry exactly zero weight, padded query rows
are left out of every mean. Token classes come from `jaxattn.token_classes`
(one definition for host and device), packed as bits per token.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxattn.token_classes import CLS_BIT, PUNCT_BIT, SEP_BIT


def head_statistics(weights, mask, classes):
    """weights [H, T, S] (T == S), mask [T] bool, classes [T] int8 bits -> [H, N].

    N follows `jaxattn.quantities.HEAD_STATS`: cls, sep, punct, self, prev,
    next, entropy (nats, 0 ln 0 = 0), entropy_cls (NaN without a cls token).
    """
    real = mask.astype(weights.dtype)  # [T]
    n = real.sum()

    def mean_over_rows(per_row):  # [H, T] -> [H], real rows only
        return (per_row * real).sum(-1) / n

    def attention_to(bit):
        keys = ((classes & bit) != 0).astype(weights.dtype)  # [S]
        return mean_over_rows((weights * keys).sum(-1))

    diag = jnp.diagonal(weights, 0, 1, 2)  # [H, T]
    below = jnp.diagonal(weights, -1, 1, 2)  # W[i, i-1] for i = 1..T-1
    above = jnp.diagonal(weights, 1, 1, 2)  # W[i, i+1] for i = 0..T-2 (past the end: 0)
    logs = jnp.log(jnp.where(weights > 0, weights, 1.0))
    entropy = -(weights * logs).sum(-1)  # [H, T]
    cls_rows = ((classes & CLS_BIT) != 0).astype(weights.dtype) * real
    entropy_cls = jnp.where(
        cls_rows.sum() > 0, (entropy * cls_rows).sum(-1) / cls_rows.sum(), jnp.nan
    )
    stats = (
        attention_to(CLS_BIT),
        attention_to(SEP_BIT),
        attention_to(PUNCT_BIT),
        mean_over_rows(diag),
        (below * real[1:]).sum(-1) / n,
        (above * real[:-1]).sum(-1) / n,
        mean_over_rows(entropy),
        entropy_cls,
    )
    return jnp.stack(stats, axis=-1)


def normalise_rows(weights):
    """weights / their row sums; all-zero rows stay zero (`analysis.normalise_rows`)."""
    total = weights.sum(-1, keepdims=True)
    return jnp.where(total > 0, weights / jnp.where(total > 0, total, 1.0), 0.0)
