"""Clark et al. 2019's per-head statistics, on the device (the head_stats quantities).

The same numbers as `jaxattn.analysis.head_statistics` computes on the host
from a trimmed [L, H, T, T] map, computed inside the jitted step from the
padded weights, so a corpus analysis copies [L, H, N] per example instead of
the maps. The per-row quantities (row_head_stats, decoder_row_head_stats and
their norm twins, `KINDS`) are the same statistics before the mean over rows
(`encoder_rows`, `decoder_rows`), and the means are taken from them
(`row_mean`), so one definition serves both. Padding: padded keys carry exactly
zero weight and are left out of the entropies' smoothing, padded query rows are
NaN per row and left out of every mean. Token
classes come from `jaxattn.token_classes` (one definition for host and device),
packed as bits per token.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from jaxattn.quantities import (
    DECODER_HEAD_STATS,
    ENTROPY_SMOOTHING,
    HEAD_STATS,
    QUANTITIES,
    ROW_STATISTICS,
    STATISTICS,
)
from jaxattn.token_classes import CLS_BIT, PUNCT_BIT, SEP_BIT


def _smoothed_entropy(weights, keys, visible):
    """[H, T]: each row's entropy in nats after Clark et al.'s smoothing
    (1 - s) w + s / keys over the keys `visible` [T, S] or [S] lets it see
    (`keys`: their count, a scalar or [T, 1]); the others stay 0.

    One expression per weight (smoothed > 0 wherever a key is visible: s / keys > 0),
    so that it compiles to one pass over the map rather than three."""
    s = ENTROPY_SMOOTHING
    smoothed = (1.0 - s) * weights + s / keys
    return -jnp.where(visible > 0, smoothed * jnp.log(smoothed), 0.0).sum(-1)


def _keys_of(bit, classes_k, real_k):
    """[S] 1.0 on the real keys of a token class."""
    return ((classes_k & bit) != 0).astype(real_k.dtype) * real_k


def row_terms(
    weights,
    rows,
    keys,
    mask_k,
    classes_k,
    count,
    decoder: bool = False,
    whole: bool = False,
    causal: bool = True,
) -> dict:
    """The per-row sums the statistics are means of, from weights [H, T', S'] of query
    positions `rows` [T'] against key positions `keys` [S'] (mask_k [S'] bool, classes_k
    [S'] int8 bits of those keys; `count` the example's real tokens). {name: [H, T']}.

    Every term is a sum over keys of a function of one weight, so the terms of a row
    are the sums of its key blocks' terms: the dense path calls this once on the
    whole [H, T, T] map, the blockwise path (`jaxattn.engine.blockwise`) once per
    query block x key block and adds them up. Encoder (`head_statistics`): cls, sep,
    punct, self, prev (w[i, i-1]), next (w[i, i+1]), entropy (Clark et al.'s smoothing
    over the `count` real keys). Decoder (`decoder_statistics`): first (w[i, 0]),
    prev, self, punct, entropy (smoothing over the keys row i can see: the i + 1 keys
    j <= i of a `causal` model; an encoder's rows, `causal` False, see all `count`
    real keys, as the encoder statistics' entropy).

    whole: the weights are the whole square map (rows and keys both 0 .. T-1, the
    dense path): the terms of one key offset (self, prev, next, first) are then read
    off its diagonals (`_diagonal`), the same numbers without a pass over the map each.
    """
    real_k = mask_k.astype(weights.dtype)
    offset = keys[None, :] - rows[:, None]  # [T', S']: j - i

    def at(d):  # each row's weight on key i + d (0 where there is none)
        if whole:
            return _diagonal(weights, d)
        return jnp.where(offset == d, weights, 0.0).sum(-1)

    def to(bit):
        return (weights * _keys_of(bit, classes_k, real_k)).sum(-1)

    out = {"self": at(0), "prev": at(-1), "punct": to(PUNCT_BIT)}
    if decoder:
        visible = (offset <= 0) * real_k[None, :]  # [T', S']: j <= i, real
        first = weights[..., 0] if whole else jnp.where(keys[None, :] == 0, weights, 0.0).sum(-1)
        out["first"] = first
        if causal:
            out["entropy"] = _smoothed_entropy(weights, rows[:, None] + 1.0, visible)
        else:  # an encoder's row sees every real key
            out["entropy"] = _smoothed_entropy(weights, count, real_k)
    else:
        out |= {"cls": to(CLS_BIT), "sep": to(SEP_BIT), "next": at(1)}
        out["entropy"] = _smoothed_entropy(weights, count, real_k)  # padded keys stay 0
    return out


def _diagonal(weights, d: int):
    """[..., T, T] -> [..., T]: each row i's weight on key i + d, 0 where no such key
    (rows 0 .. -d-1 or T-d .. T-1), read as a strided slice of the flattened map: the
    terms `jnp.where(offset == d, weights, 0).sum(-1)` computes, exactly (one weight
    plus zeros), without reading the rest of the map."""
    t = weights.shape[-1]
    flat = weights.reshape(*weights.shape[:-2], t * t)
    start = d if d >= 0 else -d * t  # row max(-d, 0)'s key i + d
    diagonal = flat[..., start :: t + 1][..., : t - abs(d)]
    return jnp.pad(diagonal, [(0, 0)] * (weights.ndim - 2) + [(max(-d, 0), max(d, 0))])


def _rows_only(per_row, rows):
    """[..., T] -> the same with NaN on the rows not in `rows` [T] bool."""
    return jnp.where(rows, per_row, jnp.nan)


def encoder_rows(terms: dict, mask, classes):
    """`row_terms` of every row [H, T] (encoder), mask [T] bool, classes [T] -> [H, T, N]:
    each row's statistics (the row_head_stats quantities, `HEAD_STATS` order).

    cls .. entropy are the row's terms (prev 0 on row 0 and next 0 on the last real
    row: no such key, or a padded one of zero weight); entropy_cls is NaN on every row
    but a [CLS] row, sep_sep on every row but a [SEP] row, rest_sep on [SEP] rows;
    padded rows are NaN throughout. `row_mean` of it is the head_stats table.
    """
    real = mask.astype(bool)
    cls_rows = real & ((classes & CLS_BIT) != 0)
    sep_rows = real & ((classes & SEP_BIT) != 0)
    columns = dict(terms)
    columns["entropy_cls"] = _rows_only(terms["entropy"], cls_rows)
    columns["sep_sep"] = _rows_only(terms["sep"], sep_rows)
    columns["rest_sep"] = _rows_only(terms["sep"], real & ~sep_rows)
    return _rows_only(jnp.stack([columns[name] for name in HEAD_STATS], axis=-1), real[:, None])


def decoder_rows(terms: dict, mask):
    """`row_terms` of every row [H, T] (decoder), mask [T] bool -> [H, T, P]: each row's
    decoder statistics (the decoder_row_head_stats quantities, `DECODER_HEAD_STATS`
    order), NaN on row 0 (it sees only itself under causal attention) and padded rows.
    `row_mean` of it is the decoder_head_stats table (rows 1 .. n-1)."""
    rows = mask.astype(bool) & (jnp.arange(mask.shape[0]) >= 1)
    stacked = jnp.stack([terms[name] for name in DECODER_HEAD_STATS], axis=-1)
    return _rows_only(stacked, rows[:, None])


def row_mean(per_row):
    """[H, T, X] -> [H, X]: each column's mean over the rows that are not NaN (NaN if none)."""
    seen = ~jnp.isnan(per_row)
    count = seen.sum(-2)
    total = jnp.where(seen, per_row, 0.0).sum(-2)
    return jnp.where(count > 0, total / jnp.maximum(count, 1), jnp.nan)


def encoder_statistics_from_rows(terms: dict, mask, classes):
    """`row_terms` of every row [H, T] (encoder), mask [T] bool, classes [T] -> [H, N]."""
    return row_mean(encoder_rows(terms, mask, classes))


def decoder_statistics_from_rows(terms: dict, mask):
    """`row_terms` of every row [H, T] (decoder), mask [T] bool -> [H, P]."""
    return row_mean(decoder_rows(terms, mask))


# The statistics quantities: name -> (of the norm weights alpha ||f|| rows normalised
# rather than alpha, the decoder's definitions, per row rather than means over rows),
# read from `jaxattn.quantities`: the norm ones are named so, a decoder's have the P
# axis, the per-row ones a T axis.
KINDS = {
    name: (
        "norm_" in name,
        QUANTITIES[name].axis("P") is not None,
        QUANTITIES[name].axis("T") is not None,
    )
    for name in (*STATISTICS, *ROW_STATISTICS)
}


def all_row_terms(weights, mask, classes, decoder: bool = False, causal: bool = True) -> dict:
    """`row_terms` of a whole [H, T, T] map (the dense path): {name: [H, T]}."""
    index = jnp.arange(weights.shape[-1])
    count = mask.astype(weights.dtype).sum()
    return row_terms(weights, index, index, mask, classes, count, decoder, True, causal)


def finish(name: str, terms: dict, mask, classes):
    """The statistics quantity `name` (`KINDS`) of every head's `row_terms`
    of every row [H, T]: [H, N] / [H, P] means, or [H, T, N] / [H, T, P] per row."""
    _, decoder, per_row = KINDS[name]
    rows = decoder_rows(terms, mask) if decoder else encoder_rows(terms, mask, classes)
    return rows if per_row else row_mean(rows)


@partial(jax.jit, static_argnums=(3, 4))
def dense(weights, mask, classes, names: tuple[str, ...], causal: bool = True) -> dict:
    """The statistics quantities `names` (`KINDS`, all encoder's or all decoder's) of one
    whole [H, T, T] map (the dense path), mask [T] bool, classes [T] int8 bits, `causal`
    the model's (the decoder entropy's keys, `row_terms`): {name: `finish`'s}.

    Jitted on its own so that a capture program traces it once per shape, not once
    per layer: inside the program (vmapped) each layer's call is one nested call whose
    jaxpr and batching jax keeps, where inline code cost a trace of its many small
    operations at every layer (BENCHMARKS.md, "Statistics-only dumps").
    """
    decoder = KINDS[names[0]][1]
    terms = all_row_terms(weights, mask, classes, decoder, causal)
    return {name: finish(name, terms, mask, classes) for name in names}


def head_statistics(weights, mask, classes):
    """weights [H, T, S] (T == S), mask [T] bool, classes [T] int8 bits -> [H, N].

    N follows `jaxattn.quantities.HEAD_STATS`: cls, sep, punct, self, prev,
    next, entropy and entropy_cls (nats, of rows smoothed by ENTROPY_SMOOTHING
    over the real keys; entropy_cls NaN without a cls token), sep_sep and
    rest_sep (NaN without such rows).
    """
    return encoder_statistics_from_rows(all_row_terms(weights, mask, classes), mask, classes)


def normalise_rows(weights):
    """weights / their row sums; all-zero rows stay zero (`analysis.normalise_rows`)."""
    total = weights.sum(-1, keepdims=True)
    return jnp.where(total > 0, weights / jnp.where(total > 0, total, 1.0), 0.0)


def decoder_statistics(weights, mask, classes, causal: bool = True):
    """weights [H, T, S] (T == S), mask [T] bool, classes [T] int8 bits -> [H, P].

    P follows `jaxattn.quantities.DECODER_HEAD_STATS`: first, prev, self, punct
    and entropy (nats, row i smoothed by ENTROPY_SMOOTHING over the real keys
    it can see: j <= i, or every one for a model that is not `causal`), each a
    mean over the real query rows 1 .. n-1 (NaN for an example of one token).
    The same numbers as `jaxattn.analysis.decoder_head_statistics` from a trimmed map.
    """
    terms = all_row_terms(weights, mask, classes, True, causal)
    return decoder_statistics_from_rows(terms, mask)
