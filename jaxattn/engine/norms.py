"""Norm-based attention (Kobayashi et al. 2020, "Attention is Not Only a Weight").

Per layer and head h, the attention output at query i is
sum_j alpha^h_ij f_h(x_j) with f_h(x) = (x W_V^h + b_V^h) W_O^h (the output
bias b_O is left out, as the paper does). With v = x W_V^h + b_V^h, every norm
here is a quadratic form in v through the weight-only Gram matrix
M[h,k,g,j] = <W_O^h[k, :], W_O^g[j, :]>, so neither f ([S, H, D], twelve times
the hidden state) nor alpha f ([H, T, S, D]) is ever materialised:

* ||f_h(x_j)||^2 = v_h^T M[h,:,h,:] v_h: O(S H K^2);
* ||alpha f|| = alpha ||f||, because alpha >= 0;
* ||sum_h alpha^h_ij f_h(x_j)||^2 = alpha_ij^T G_j alpha_ij with the per-token
  head Gram matrix G_j[h, g] = <f_h(x_j), f_g(x_j)> = v_h^T M[h,:,g,:] v_g:
  O(S D^2) for G plus O(T S H^2) for the quadratic forms.

Measured on the CPU (B=64, T=32, MiniLM sizes), these forms are 13x (fx_norm)
and 1.9x (Gram) faster than going through f, whose einsum is memory-bound.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from jaxattn.engine.precision import Matmul

_EXACT = Matmul()


def output_gram(w_out, mm: Matmul = _EXACT):
    """M[g, j, h, k] = <W_O^h[k, :], W_O^g[j, :]> from w_out [H, K, D]: [H, K, H, K].

    Depends on weights only; under vmap it is computed once per batch.
    """
    return mm("GJD,HKD->GJHK", w_out, w_out)


def fx_norm(values, w_out, mm: Matmul = _EXACT):
    """||f_h(x_j)||: values [S, H, K], w_out [H, K, D] -> [H, S]."""
    per_head = mm("HKD,HJD->HKJ", w_out, w_out)  # [H, K, K]
    squared = mm("SHK,HKJ,SHJ->HS", values, per_head, values)
    # Rounding can push an exact zero slightly negative; the norm is >= 0.
    return jnp.sqrt(jnp.maximum(squared, 0.0))


def alpha_fx_norm(attention, fx):
    """||alpha^h_ij f_h(x_j)|| = alpha^h_ij ||f_h(x_j)||: [H, T, S], [H, S] -> [H, T, S]."""
    return attention * fx[:, None, :]


def head_gram(values, w_out, mm: Matmul = _EXACT):
    """G_j[h, g] = <f_h(x_j), f_g(x_j)>: values [S, H, K], w_out [H, K, D] -> [S, H, H]."""
    m = output_gram(w_out, mm)  # [G, J, H, K]
    # w[g, s, h, k] = sum_j v[s, g, j] M[g, j, h, k]: one [S, K] x [K, H K] GEMM per head g.
    w = mm("SGJ,GJHK->GSHK", values, m)
    return mm("GSHK,SHK->SHG", w, values)


def _quadratic_form(attention, gram, mm: Matmul = _EXACT):
    """alpha_ij^T G_j alpha_ij: [H, T, S], [S, H, G] -> [T, S], elementwise (no D).

    The form sees G_j's symmetric part only: sum_h G_hh a_h^2 + sum_{h<g} (G_hg + G_gh) a_h a_g,
    H (H + 1) / 2 products per (i, j), written out as one elementwise expression,
    which XLA fuses into one vectorised loop over [T, S] (each G_j coefficient a
    row of [S] broadcast along T). The batched dot (alpha G) . alpha it replaces
    had a batch of S tiny [T, H] x [H, H] products, with [H, T, S] transposes
    in and out: on the CPU (2026-11-27, BENCHMARKS.md "Decoder full capture on
    the CPU, taken apart") 5x slower at H=12, T=1,024, 2.7x at H=32. Sums in
    float32 whatever `mm`'s precision, which only rounds contraction operands.
    """
    del mm  # no contraction: float32 products and sums
    heads = attention.shape[0]
    # sym[h, g] = G_hh on the diagonal, G_hg + G_gh above it; rows of [S].
    both = gram + jnp.swapaxes(gram, -1, -2)
    sym = jnp.where(jnp.eye(heads, dtype=bool), gram, both)
    sym = jnp.moveaxis(sym, 0, -1)  # [H, G, S]
    # The rows taken apart once each (two ops), not indexed per product: this form's
    # ~H^2 operations are most of tracing a capture step, and an index under vmap,
    # deep in the model's stack, costs several times a product (issue 26: a cached
    # first capture is mostly tracing). Same products in the same order, same bits.
    coefficient = lax.unstack(sym.reshape(heads * heads, sym.shape[-1]))  # [h * H + g]
    alpha = lax.unstack(attention)
    total = None
    for h in range(heads):
        inner = coefficient[h * heads + h] * alpha[h]
        for g in range(h + 1, heads):
            inner = inner + coefficient[h * heads + g] * alpha[g]
        term = alpha[h] * inner
        total = term if total is None else total + term
    return total


def sum_alpha_fx_norm(attention, values, w_out, mm: Matmul = _EXACT):
    """||sum_h alpha^h_ij f_h(x_j)|| over all heads of the layer.

    Args:
      attention: [H, T, S] weights of all heads.
      values: [S, H, K] value projections of all heads (bias included).
      w_out: [H, K, D] the output projection split per head.

    Returns:
      [T, S]
    """
    return gram_norm(attention, head_gram(values, w_out, mm), mm)


def gram_norm(attention, gram, mm: Matmul = _EXACT):
    """||sum_h alpha^h_ij f_h(x_j)|| from the per-token head Gram matrices (`head_gram`):
    attention [H, T, S] of all heads, gram [S, H, H] -> [T, S]; the blockwise path
    (`jaxattn.engine.blockwise`) calls it per block of queries and keys."""
    # alpha_ij^T G_j alpha_ij: O(T S H^2), no D.
    squared = _quadratic_form(attention, gram, mm)
    return jnp.sqrt(jnp.maximum(squared, 0.0))


def residual_norm(attention, values, w_out, x, mm: Matmul = _EXACT):
    """||sum_h alpha^h_ij f_h(x_j) + delta_ij x_j||: the attention block with its residual.

    Kobayashi et al. 2021 ("Incorporating Residual and Normalization Layers into
    Analysis of Masked Language Models"), AttnRes-N: token j's contribution to
    position i of x + Attn(x), the residual x_i counted as i's own.

    Args:
      attention: [H, T, S]; values: [S, H, K]; w_out: [H, K, D]; x: [S, D] the
        layer input (T == S: self-attention).

    Returns:
      [T, S]
    """
    squared = _quadratic_form(attention, head_gram(values, w_out, mm), mm)
    # On the diagonal add 2 <sum_h alpha^h_ii f_h(x_i), x_i> + ||x_i||^2, with
    # <f_h(x_j), x_j> = v_h . (W_O^h x_j): no f needed.
    fx_dot_x = mm("SHK,HKD,SD->SH", values, w_out, x)  # [S, H]
    diag_alpha = jnp.diagonal(attention, axis1=1, axis2=2)  # [H, T]
    extra = 2.0 * mm("HS,SH->S", diag_alpha, fx_dot_x)
    extra = extra + jnp.sum(x * x, axis=-1)
    squared = squared + jnp.diag(extra)
    return jnp.sqrt(jnp.maximum(squared, 0.0))


def residual_ln_norm(
    attention, values, w_out, x, gamma, std, mm: Matmul = _EXACT, centre: bool = True
):
    """Contribution norms through the attention block, residual and LayerNorm.

    Kobayashi et al. 2021, AttnResLn-N: with the LayerNorm's statistics of the
    real pre-LN vector y_i (mean, std s_i) fixed, LN is affine, so
    LN(y_i) = sum_j gamma * (c_ij - mean(c_ij)) / s_i + (bias terms), with
    c_ij = sum_h alpha^h_ij f_h(x_j) + delta_ij x_j. Centring and the gamma
    scale are linear, so they fold into W_O and x: the same quadratic forms as
    `residual_norm` with W~ = gamma * (W_O - mean_D W_O) and x~ = gamma * (x - mean_D x),
    divided by s_i. The bias b_O and beta are not attributed to any token.

    Args:
      attention, values, w_out, x: as `residual_norm`.
      gamma: [D] the LayerNorm scale.
      std: [T] s_i = sqrt(var(y_i) + eps) of the real pre-LN vectors (an RMSNorm:
        sqrt(mean(y_i^2) + eps)).
      centre: False for an RMSNorm, which subtracts no mean: W~ = gamma * W_O, x~ = gamma * x.

    Returns:
      [T, S]
    """
    if centre:
        w_out = w_out - w_out.mean(-1, keepdims=True)
        x = x - x.mean(-1, keepdims=True)
    w_tilde, x_tilde = gamma * w_out, gamma * x
    return residual_norm(attention, values, w_tilde, x_tilde, mm) / std[:, None]


def _norm(v):
    return jnp.sqrt(jnp.sum(v * v, axis=-1))


def mixing(
    attention, values, w_out, x, gamma, std, mm: Matmul = _EXACT, centre: bool = True
) -> dict:
    """Kobayashi et al. 2021's context-mixing norms and ratios of every position.

    With v_ij token j's contribution vector to position i (`jaxattn.quantities.NORM_MEASURES`:
    sum_h alpha^h_ij f_h(x_j); plus delta_ij x_j; then gamma * centre(.) / s_i),
    the mixing ratio is the authors' norm of sums (their ``BertNormOutput``):

        r_i = ||sum_{j != i} v_ij|| / (||sum_{j != i} v_ij|| + ||v_ii||),

    not a ratio of the per-pair norms ||v_ij||, which differs by the triangle
    inequality. sum_{j != i} v_ij is the block's bias-free output for i without
    its own term, so no [T, S, D] tensor is needed: the off-diagonal weighted
    sum of the values and the own term each cost one [T, D] output projection.
    The residual adds to the own term only; centring and gamma are linear, so
    the LayerNorm measure applies them to both sums (biases b_O and beta are
    attributed to no token, as in the paper).

    Args:
      attention: [H, T, S] (T == S); values: [S, H, K]; w_out: [H, K, D];
      x: [S, D] the residual entering the block's addition; gamma: [D] the next
        LayerNorm's scale; std: [T] the real statistics s_i of that LayerNorm's input;
      centre: False for an RMSNorm (no mean subtracted).

    Returns:
      {"mixing_norm", "preserving_norm", "mixing_ratio"}: each [T, M], M in
      `jaxattn.quantities.NORM_MEASURES` order; a ratio of 0 / 0 is 0.
    """
    own = jnp.diagonal(attention, axis1=1, axis2=2)  # [H, T]
    others = jnp.where(jnp.eye(attention.shape[1], dtype=bool)[None], 0.0, attention)
    mixed = mm("THK,HKD->TD", mm("HTS,SHK->THK", others, values), w_out)  # sum_{j != i}
    kept = mm("THK,HKD->TD", own.T[:, :, None] * values, w_out)  # v_ii of Attn-N

    def through_ln(v):  # [T, D] -> its LayerNorm-decomposed vector's norm
        return _norm(gamma * (v - v.mean(-1, keepdims=True) if centre else v)) / std

    mix = jnp.stack([_norm(mixed), _norm(mixed), through_ln(mixed)], -1)
    keep = jnp.stack([_norm(kept), _norm(kept + x), through_ln(kept + x)], -1)
    total = mix + keep
    ratio = jnp.where(total > 0, mix / jnp.where(total > 0, total, 1.0), 0.0)
    return {"mixing_norm": mix, "preserving_norm": keep, "mixing_ratio": ratio}
