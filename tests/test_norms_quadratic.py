"""The head-Gram quadratic form of sum_alpha_fx_norm (`norms.gram_norm`), elementwise over
head pairs, against hand-computed values and a float64 einsum."""

import numpy as np
import pytest

from jaxattn.engine import norms


def test_two_heads_by_hand():
    # a^T G a with G = [[1, 2], [3, 4]]: a1^2 + (2 + 3) a1 a2 + 4 a2^2 (G not symmetric:
    # the form sees its symmetric part only).
    attention = np.array([[[0.5, 0.0]], [[0.25, 1.0]]], np.float32)  # [H=2, T=1, S=2]
    gram = np.array([[[1, 2], [3, 4]], [[2, 0], [0, 9]]], np.float32)  # [S=2, H, G]
    # key 0: 0.25 + 5 * 0.125 + 4 * 0.0625 = 1.125; key 1: 2 * 0 + 0 + 9 * 1 = 9
    got = np.asarray(norms.gram_norm(attention, gram))
    np.testing.assert_allclose(got, np.sqrt([[1.125, 9.0]]), rtol=1e-6)


@pytest.mark.parametrize("heads", [1, 3, 7])
def test_matches_a_float64_einsum(heads):
    rng = np.random.default_rng(heads)
    attention = rng.random((heads, 5, 9)).astype(np.float32)  # [H, T, S], odd sizes
    attention /= attention.sum(-1, keepdims=True)
    f = rng.standard_normal((9, heads, 11))  # per-token f_h(x_j): G_j = F_j F_j^T >= 0
    gram = np.einsum("shd,sgd->shg", f, f).astype(np.float32)
    want = np.einsum(
        "hts,shg,gts->ts", *(x.astype(np.float64) for x in (attention, gram, attention))
    )
    got = np.asarray(norms.gram_norm(attention, gram))
    np.testing.assert_allclose(got, np.sqrt(want), rtol=2e-6, atol=1e-7)
