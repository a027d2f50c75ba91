"""The model's contractions: `Matmul` as one dot_general where it can, and params
read without flax's traced shape check; both must change tracing time only."""

from __future__ import annotations

import flax.linen as nn
import jax
import numpy as np
import pytest

from jaxattn.engine.layers import Dense, param
from jaxattn.engine.precision import Matmul, _dot_plan
from jaxattn.errors import CheckpointError

# Every contraction the encoder makes, and a few it does not (odd sizes: a
# swapped axis shows as a shape or value mismatch).
SIZES = {"T": 5, "S": 7, "H": 3, "K": 4, "D": 6, "P": 9, "G": 2, "J": 4, "E": 8}
EQUATIONS = [
    "TD,DHK->THK",
    "THK,SHK->HTS",
    "HTS,SHK->THK",
    "THK,HKD->TD",
    "TE,ED->TD",
    "THK,PHK->HTP",
    "SHK,PHK->HSP",
    "GJD,HKD->GJHK",
    "HKD,HJD->HKJ",
    "SGJ,GJHK->GSHK",
    "GSHK,SHK->SHG",
    "HTS,SHG->GTS",
    "HS,SH->S",
    "TD,SD->ST",
    "D,D->",
    "TD,DK->TKD",
]
# Three operands, a diagonal, an index summed alone, an implicit output (einsum's
# alphabetical order: "TD,DE" gives [E, T]).
FALLBACK = ["SHK,HKJ,SHJ->HS", "TT,TD->TD", "TD,SE->TS", "TD,DE"]


def _operands(equation, rng):
    inputs = equation.split("->")[0].split(",")
    return [rng.standard_normal([SIZES[i] for i in spec]).astype(np.float32) for spec in inputs]


@pytest.mark.parametrize("equation", EQUATIONS + FALLBACK)
def test_contractions_equal_numpys_einsum(equation):
    ops = _operands(equation, np.random.default_rng(len(equation)))
    want = np.einsum(equation, *[x.astype(np.float64) for x in ops])
    got = np.asarray(jax.jit(lambda *xs: Matmul()(equation, *xs))(*ops))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_what_goes_to_dot_general_and_what_to_jnp_einsum():
    for equation in EQUATIONS:
        assert _dot_plan(equation) is not None, equation
    assert _dot_plan("TD,DHK->THK")[1] is None  # already in einsum's order: no transpose
    assert _dot_plan("THK,SHK->HTS")[1] is None  # batch H, then T, then S
    assert _dot_plan("HTS,SHK->THK")[1] == (1, 0, 2)  # dot_general gives [H, T, K]
    for equation in ["TT,TD->TD", "TD,SE->TS", "TD,DE", "...D,DE->...E"]:
        assert _dot_plan(equation) is None, equation  # jnp.einsum's own rules


def test_vmapped_contractions_equal_numpys_einsum():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((4, 5, 3, 2)).astype(np.float32)  # [B, T, H, K]
    k = rng.standard_normal((4, 7, 3, 2)).astype(np.float32)
    got = jax.vmap(lambda a, b: Matmul()("THK,SHK->HTS", a, b))(q, k)
    want = np.einsum("bthk,bshk->bhts", q.astype(np.float64), k)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


class _Probe(nn.Module):
    @nn.compact
    def __call__(self, x):
        return x @ param(self, "w", nn.initializers.ones, (x.shape[-1], 2))


def test_params_are_created_by_init_and_checked_by_shape_on_apply():
    x = np.ones((3, 4), np.float32)
    params = _Probe().init(jax.random.key(0), x)["params"]
    assert params["w"].shape == (4, 2)
    np.testing.assert_array_equal(_Probe().apply({"params": params}, x), np.full((3, 2), 4.0))
    need = r"param w has shape \(4, 2\), the config needs \(5, 2\)"
    with pytest.raises(CheckpointError, match=need):
        _Probe().apply({"params": params}, np.ones((3, 5), np.float32))


def test_a_wrongly_shaped_checkpoint_kernel_names_its_path():
    dense = Dense((6, 3), (3,), "TD,DK->TK")
    params = {"kernel": np.ones((6, 4), np.float32), "bias": np.zeros(3, np.float32)}
    need = r"param kernel has shape \(6, 4\), the config needs \(6, 3\)"
    with pytest.raises(CheckpointError, match=need):
        dense.apply({"params": params}, np.ones((2, 6), np.float32))
