"""Compute precision: highest is exact; tf32 and bf16 stay within the documented bounds.

The bounds are docs/reference/dtypes.md's table (measured on all-MiniLM-L6-v2 over 200 EWT
sentences: tf32 2e-3, bf16 1.6e-2 for attention; relative to the tensor's
largest value for the rest). On the CPU tf32 and bf16 are emulated (operands
rounded to 10 / 7 mantissa bits, float32 sums), which is what the GPU does.
"""

from __future__ import annotations

import numpy as np
import pytest
from hf_fixtures import EXAMPLE_A, EXAMPLE_B

from jaxattn.engine.precision import Matmul
from jaxattn.errors import UsageError
from jaxattn.spec import PRECISIONS

WHAT = ("attention", "alpha_fx_norm", "sum_alpha_fx_norm", "hidden_states")
# Both in bucket 24 (19 and 21 tokens): one compiled shape per precision.
TEXTS = [
    (EXAMPLE_A, EXAMPLE_B),
    "the quick brown fox jumps over the lazy dog and the cat sat on the mat with a dog",
]
# precision -> (attention abs bound, relative bound of the other quantities)
BOUNDS = {"tf32": (2e-3, 2e-3), "bf16": (1.6e-2, 1.4e-2)}


@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_fast_precisions_stay_within_the_documented_error(engines, precision):
    engine = engines["bert"]
    ref = engine.capture(TEXTS, what=WHAT)
    got = engine.capture(TEXTS, what=WHAT, precision=precision)
    attention_bound, relative_bound = BOUNDS[precision]
    moved = False
    for a, b in zip(got, ref, strict=True):
        assert a.precision == precision and b.precision == "highest"
        for name in WHAT:
            x, y = a.array(name).astype(np.float64), b.array(name).astype(np.float64)
            err = np.abs(x - y).max()
            moved |= err > 0
            if name == "attention":
                assert err <= attention_bound, (name, err)
            else:
                assert err <= relative_bound * np.abs(y).max(), (name, err)
    assert moved  # the emulation really rounds


def test_the_emulation_rounds_operands_like_the_hardware():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(16, 32)).astype(np.float32), rng.normal(size=(32, 8)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)

    def rounded(x, bits):  # round to nearest even at `bits` mantissa bits, by hand
        u = x.view(np.uint32).astype(np.uint64)
        drop = 23 - bits
        half = (1 << (drop - 1)) - 1 + ((u >> drop) & 1)
        return (((u + half) >> drop) << drop).astype(np.uint32).view(np.float32)

    for precision, bits in (("tf32", 10), ("bf16", 7)):
        got = np.asarray(Matmul(precision, "cpu")("ij,jk->ik", a, b), np.float64)
        want = rounded(a, bits).astype(np.float64) @ rounded(b, bits).astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        assert np.abs(got - exact).max() > 1e-5  # and it differs from float32
    np.testing.assert_allclose(np.asarray(Matmul()("ij,jk->ik", a, b)), exact, atol=1e-5)


def test_unknown_precision_is_refused_naming_the_valid_ones(engines):
    with pytest.raises(UsageError, match="unknown precision 'fp8': valid precisions are highest"):
        engines["bert"].capture([EXAMPLE_A], precision="fp8")
    assert PRECISIONS == ("highest", "tf32", "bf16")


def test_the_engine_default_and_model_info(bert_checkpoint):
    import jaxattn

    engine = jaxattn.load(bert_checkpoint, precision="bf16")
    assert engine.info.precision == "bf16"
    assert engine.capture([EXAMPLE_A])[0].precision == "bf16"
    assert engine.capture([EXAMPLE_A], precision="highest")[0].precision == "highest"
    with pytest.raises(UsageError, match="unknown precision"):
        jaxattn.load(bert_checkpoint, precision="half")


def test_gpus_without_tensor_cores_for_tf32_emulate():
    from types import SimpleNamespace

    from jaxattn.engine.step import matmul_platform

    assert matmul_platform(SimpleNamespace(platform="gpu", compute_capability="9.0")) == "gpu"
    old = SimpleNamespace(platform="gpu", compute_capability="7.5")  # a T4
    assert matmul_platform(old) == "gpu-pre-ampere"
    assert matmul_platform(SimpleNamespace(platform="cpu")) == "cpu"


def test_a_server_that_ignores_the_precision_is_caught():
    import dataclasses

    from capture_samples import make

    from jaxattn.client.errors import AttentionServiceError
    from jaxattn.client.request import check_answer as _check_precision
    from jaxattn.v1 import attention_pb2 as pb

    request = pb.CaptureRequest(precision=pb.PRECISION_BF16)
    with pytest.raises(AttentionServiceError, match="asked for precision bf16"):
        _check_precision(request, make("float32"), "host:1")  # a 0.1 server: highest
    _check_precision(request, dataclasses.replace(make("float32"), precision="bf16"), "host:1")
    _check_precision(pb.CaptureRequest(), make("float32"), "host:1")  # unset: any
