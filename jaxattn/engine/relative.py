"""DeBERTa's disentangled attention (He et al. 2021), per example, as HF computes it.

The score of query i and key j is the sum of up to three terms, each already
divided by HF's scale sqrt(K * (1 + len(att_types))):

    c2c[h,i,j] = q_i . k_j                         content to content
    c2p[h,i,j] = q_i . pos_k[c2p_idx[i,j]]         content to position
    p2c[h,i,j] = k_j . pos_q[p2c_idx[j,i]]         position to content

with pos_q/pos_k the relative embedding table (2 * span rows, LayerNorm-ed when
norm_rel_ebd says so) through the query/key projections (share_att_key) or
through the separate pos_query_proj/pos_key_proj, c2p_idx = clip(rel + span)
and p2c_idx = clip(-rel + span) in [0, 2 * span - 1], and rel the relative
positions i - j, log-bucketed when position_buckets > 0
(transformers/models/deberta_v2/modeling_deberta_v2.py: build_relative_position,
make_log_bucket_position, DisentangledSelfAttention.disentangled_attention_bias).
HF adds them as c2c + (c2p + p2c) before the mask and the softmax.

Everything here works on ONE example (no batch axis); the engine vmaps. The
relative positions depend only on the (static) padded length, so they are
computed in numpy at trace time and enter the program as constants.

Shape legend: T query positions, S key positions (T == S: self-attention), H
heads, K head dim, P = 2 * span rows of the relative table.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from jaxattn.engine.precision import Matmul
from jaxattn.errors import CheckpointError
from jaxattn.positions import attention_span  # HF's span rule (pure: the config needs it too)

ATT_TYPES = ("c2p", "p2c")
_EXACT = Matmul()  # exact float32: the default contraction

__all__ = [
    "ATT_TYPES",
    "attention_span",
    "combine",
    "disentangled_scores",
    "relative_positions",
    "score_scale",
]


def _log32(x: np.ndarray) -> np.ndarray:
    """float32 natural log, correctly rounded (via float64).

    numpy's own float32 log is off by an ulp for some inputs (e.g. 99/44),
    enough to move a distance to the neighbouring bucket against torch, whose
    float32 log agrees with the correctly rounded value on these inputs.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(np.asarray(x, np.float64)).astype(np.float32)


def _log_buckets(rel: np.ndarray, buckets: int, max_relative: int) -> np.ndarray:
    """HF's make_log_bucket_position in numpy, with torch's float32 arithmetic."""
    mid = buckets // 2
    f32 = np.float32
    abs_pos = np.where((rel < mid) & (rel > -mid), mid - 1, np.abs(rel))
    # torch: long / int -> float32 true division; the denominator is the log of
    # the float32 tensor of the Python float (max_position - 1) / mid.
    ratio = abs_pos.astype(f32) / f32(mid)
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = _log32(ratio) / _log32(f32((max_relative - 1) / mid)) * f32(mid - 1)
        log_pos = np.ceil(scaled) + f32(mid)
        bucketed = (log_pos * np.sign(rel).astype(f32)).astype(np.int64)
    return np.where(abs_pos <= mid, rel, bucketed)


@functools.lru_cache(maxsize=64)
def relative_positions(length: int, buckets: int, max_relative: int) -> np.ndarray:
    """[T, T] int32: HF's build_relative_position for a sequence of `length`.

    rel[i, j] = i - j, log-bucketed (make_log_bucket_position with
    bucket_size=buckets, max_position=max_relative) when both are above 0.
    max_relative is the resolved value (`attention_span`'s first). Equal to
    torch's result bit for bit for the real configurations (buckets 256,
    max 512 and others tested; no buckets); for unusual (buckets, max) pairs a
    distance whose bucket boundary lies within an ulp of float32 may land in
    the neighbouring bucket, as torch's vectorised log can differ by an ulp.
    Cached; the array is read-only.
    """
    if length < 1:
        raise RuntimeError(f"length must be at least 1, got {length}")  # a padded length
    distances = np.arange(-(length - 1), length, dtype=np.int64)  # i - j, ascending
    if buckets > 0 and max_relative > 0:
        if buckets < 2 or max_relative - 1 == buckets // 2:
            # HF divides by zero here (mid == 0, or log((max - 1) / mid) == 0).
            raise CheckpointError(
                f"position_buckets={buckets} with max_relative_positions={max_relative} "
                "is degenerate: need position_buckets >= 2 and "
                "max_relative_positions - 1 != position_buckets // 2"
            )
        distances = _log_buckets(distances, buckets, max_relative)
    i = np.arange(length)
    rel = distances[i[:, None] - i[None, :] + length - 1].astype(np.int32)
    rel.setflags(write=False)
    return rel


def score_scale(head_dim: int, att_types) -> np.float32:
    """HF's scale: sqrt(K * (1 + number of position terms)) in float32."""
    factor = 1 + sum(t in att_types for t in ATT_TYPES)
    return np.sqrt(np.float32(head_dim * factor))


def disentangled_scores(
    q, k, pos_q, pos_k, rel_pos, att_types, span: int, mm: Matmul = _EXACT
) -> dict:
    """The scaled score terms of one example: {"c2c", "c2p", "p2c"} -> [H, T, S].

    Args:
      q, k: [T, H, K] content queries and keys (bias included).
      pos_q: [P, H, K] the relative table through the query projection
        (share_att_key) or pos_query_proj; needed for "p2c", else may be None.
      pos_k: [P, H, K] through the key projection or pos_key_proj; needed for
        "c2p", else may be None.
      rel_pos: [T, S] int relative positions (`relative_positions`).
      att_types: the position terms present, a subset of ("c2p", "p2c").
      span: half the table (`attention_span`'s second); P = 2 * span.
      mm: the contraction at the capture's precision.

    Returns:
      "c2c" always, plus each present att_type, every term already divided by
      `score_scale`: the softmax input (before the mask) is
      c2c + (c2p + p2c), HF's order.
    """
    bad = [t for t in att_types if t not in ATT_TYPES]
    if bad:
        raise RuntimeError(f"unknown att_types {bad}: valid are {', '.join(ATT_TYPES)}")
    scale = score_scale(q.shape[-1], att_types)
    # HF: bmm(query, key^T / scale): the key is scaled before the product.
    terms = {"c2c": mm("THK,SHK->HTS", q, k / scale)}
    rel = jnp.asarray(rel_pos)
    top = 2 * span - 1
    if "c2p" in att_types:
        c2p = mm("THK,PHK->HTP", q, pos_k)  # every query against every relative row
        index = jnp.clip(rel + span, 0, top)  # [T, S]
        terms["c2p"] = jnp.take_along_axis(c2p, index[None], axis=-1) / scale
    if "p2c" in att_types:
        p2c = mm("SHK,PHK->HSP", k, pos_q)  # every key against every relative row
        # HF gathers with the [query, key]-shaped index on key rows, then transposes.
        index = jnp.clip(-rel + span, 0, top)
        gathered = jnp.take_along_axis(p2c, index[None], axis=-1)
        terms["p2c"] = gathered.transpose(0, 2, 1) / scale
    return terms


def combine(terms: dict):
    """The softmax input (before the mask) from `disentangled_scores`' terms, in HF's order.

    HF: ``score = 0; score += c2p; score += p2c; scores = c2c + score``, so
    c2c + (c2p + p2c) whatever the order of pos_att_type.
    """
    position = [terms[t] for t in ATT_TYPES if t in terms]
    if not position:
        return terms["c2c"]
    rel = position[0] if len(position) == 1 else position[0] + position[1]
    return terms["c2c"] + rel
