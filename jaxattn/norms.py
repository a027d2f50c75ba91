"""Norm-based attention (Kobayashi et al. 2020, "Attention is Not Only a Weight").

Per layer and head h, the attention output at query i is
sum_j alpha^h_ij f_h(x_j) with f_h(x) = (x W_V^h + b_V^h) W_O^h (the output
bias b_O is left out, as the paper does). These functions compute the norms from
factors, per example, without ever materialising the [H, T, S, D] tensor
alpha^h_ij f_h(x_j):

* ||alpha f(x)|| = alpha * ||f(x)||, because alpha >= 0;
* ||sum_h alpha^h_ij f_h(x_j)||^2 = alpha_ij^T G_j alpha_ij with the per-token
  head Gram matrix G_j[h, h'] = <f_h(x_j), f_h'(x_j)>: O(S H^2 D) for the Gram
  matrices plus O(T S H^2) for the quadratic forms.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxattn.precision import HIGHEST


def value_vectors(values, w_out):
    """f_h(x_j) for every head and key position.

    Args:
      values: [S, H, K] per-head value projections (bias included).
      w_out: [H, K, D] the attention output projection split per head.

    Returns:
      [S, H, D]
    """
    return jnp.einsum("SHK,HKD->SHD", values, w_out, precision=HIGHEST)


def fx_norm(f):
    """||f_h(x_j)||: [S, H, D] -> [H, S]."""
    return jnp.linalg.norm(f, axis=-1).T


def alpha_fx_norm(attention, fx):
    """||alpha^h_ij f_h(x_j)|| = alpha^h_ij ||f_h(x_j)||: [H, T, S], [H, S] -> [H, T, S]."""
    return attention * fx[:, None, :]


def sum_alpha_fx_norm(attention, f):
    """||sum_h alpha^h_ij f_h(x_j)|| from per-token head Gram matrices.

    Args:
      attention: [H, T, S] weights of all heads of the layer.
      f: [S, H, D] value vectors of all heads.

    Returns:
      [T, S]
    """
    gram = jnp.einsum("SHD,SGD->SHG", f, f, precision=HIGHEST)  # [S, H, H]
    # alpha_ij^T G_j alpha_ij, contracted as (alpha G) . alpha: O(T S H^2), no D.
    ag = jnp.einsum("HTS,SHG->TSG", attention, gram, precision=HIGHEST)
    squared = jnp.einsum("TSG,GTS->TS", ag, attention, precision=HIGHEST)
    # Rounding can push an exact zero slightly negative; the norm is >= 0.
    return jnp.sqrt(jnp.maximum(squared, 0.0))
