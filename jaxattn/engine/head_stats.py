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

from jaxattn.quantities import DECODER_HEAD_STATS, ENTROPY_SMOOTHING
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


def _keys_of(bit, classes_k, real_k):
    """[S] 1.0 on the real keys of a token class."""
    return ((classes_k & bit) != 0).astype(real_k.dtype) * real_k


def row_terms(weights, rows, keys, mask_k, classes_k, count, decoder: bool = False) -> dict:
    """The per-row sums the statistics are means of, from weights [H, T', S'] of query
    positions `rows` [T'] against key positions `keys` [S'] (mask_k [S'] bool, classes_k
    [S'] int8 bits of those keys; `count` the example's real tokens). {name: [H, T']}.

    Every term is a sum over keys of a function of one weight, so the terms of a row
    are the sums of its key blocks' terms: the dense path calls this once on the
    whole [H, T, T] map, the blockwise path (`jaxattn.engine.blockwise`) once per
    query block x key block and adds them up. Encoder (`head_statistics`): cls, sep,
    punct, self, prev (w[i, i-1]), next (w[i, i+1]), entropy (Clark et al.'s smoothing
    over the `count` real keys). Decoder (`decoder_statistics`): first (w[i, 0]),
    prev, self, punct, entropy (smoothing over the i + 1 keys row i can see).
    """
    real_k = mask_k.astype(weights.dtype)
    offset = keys[None, :] - rows[:, None]  # [T', S']: j - i

    def at(d):  # each row's weight on key i + d
        return jnp.where(offset == d, weights, 0.0).sum(-1)

    def to(bit):
        return (weights * _keys_of(bit, classes_k, real_k)).sum(-1)

    out = {"self": at(0), "prev": at(-1), "punct": to(PUNCT_BIT)}
    if decoder:
        visible = (offset <= 0) * real_k[None, :]  # [T', S']: j <= i, real
        out["first"] = jnp.where(keys[None, :] == 0, weights, 0.0).sum(-1)
        out["entropy"] = _smoothed_entropy(weights, rows[:, None] + 1.0, visible)
    else:
        out |= {"cls": to(CLS_BIT), "sep": to(SEP_BIT), "next": at(1)}
        out["entropy"] = _smoothed_entropy(weights, count, real_k)  # padded keys stay 0
    return out


def encoder_statistics_from_rows(terms: dict, mask, classes):
    """`row_terms` of every row [H, T] (encoder), mask [T] bool, classes [T] -> [H, N]."""
    real = mask.astype(terms["self"].dtype)  # [T]
    n = real.sum()
    t = real.shape[0]

    def rows_of(bit):
        return _keys_of(bit, classes, real)

    sep_rows = rows_of(SEP_BIT)
    index = jnp.arange(t)
    has_prev = real * (index >= 1)  # W[i, i-1] counts for real rows i >= 1
    has_next = real * (index <= t - 2)  # W[i, i+1] for rows below the last
    stats = (
        _mean_over(terms["cls"], real),
        _mean_over(terms["sep"], real),
        _mean_over(terms["punct"], real),
        _mean_over(terms["self"], real),
        (terms["prev"] * has_prev).sum(-1) / n,
        (terms["next"] * has_next).sum(-1) / n,
        _mean_over(terms["entropy"], real),
        _mean_over(terms["entropy"], rows_of(CLS_BIT)),
        _mean_over(terms["sep"], sep_rows),
        _mean_over(terms["sep"], real - sep_rows),
    )
    return jnp.stack(stats, axis=-1)


def decoder_statistics_from_rows(terms: dict, mask):
    """`row_terms` of every row [H, T] (decoder), mask [T] bool -> [H, P]."""
    real = mask.astype(terms["self"].dtype)
    rows = real * (jnp.arange(real.shape[0]) >= 1)  # query rows 1 .. n-1
    return jnp.stack([_mean_over(terms[name], rows) for name in DECODER_HEAD_STATS], axis=-1)


def head_statistics(weights, mask, classes):
    """weights [H, T, S] (T == S), mask [T] bool, classes [T] int8 bits -> [H, N].

    N follows `jaxattn.quantities.HEAD_STATS`: cls, sep, punct, self, prev,
    next, entropy and entropy_cls (nats, of rows smoothed by ENTROPY_SMOOTHING
    over the real keys; entropy_cls NaN without a cls token), sep_sep and
    rest_sep (NaN without such rows).
    """
    index = jnp.arange(weights.shape[-1])
    count = mask.astype(weights.dtype).sum()
    terms = row_terms(weights, index, index, mask, classes, count)
    return encoder_statistics_from_rows(terms, mask, classes)


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
    index = jnp.arange(weights.shape[-1])
    terms = row_terms(weights, index, index, mask, classes, None, decoder=True)
    return decoder_statistics_from_rows(terms, mask)
