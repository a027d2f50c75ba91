"""A batch that does not fit the device's memory is run in halves, never a crash."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from device_failures import FailingFetch

import jaxattn
from jaxattn.errors import DeviceMemoryError

WORDS = "i went to the store and bought fresh strawberries at the market".split()
TEXTS = [" ".join(WORDS[: 3 + i % 4]) for i in range(8)]  # 5-8 tokens: one batch of 8


class SmallDevice:
    """The engine's step, failing like XLA does for batches over `limit` rows."""

    def __init__(self, step, limit: int, at_dispatch: bool):
        self.step, self.limit, self.at_dispatch = step, limit, at_dispatch
        self.place, self.params = step.place, step.params
        self.canonical_params = step.canonical_params
        self.sizes: list[int] = []

    def __call__(self, spec, ids, *rest):
        self.sizes.append(ids.shape[0])
        if ids.shape[0] > self.limit:
            error = jax.errors.JaxRuntimeError(
                "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.0GiB"
            )
            if self.at_dispatch:
                raise error
            return {"attention": {"data": FailingFetch(error)}}  # fails when fetched
        return self.step(spec, ids, *rest)


@pytest.mark.parametrize("at_dispatch", [True, False])
def test_a_batch_too_large_runs_in_halves(bert_checkpoint, engines, at_dispatch):
    engine = jaxattn.load(bert_checkpoint)
    small = SmallDevice(engine.step, limit=2, at_dispatch=at_dispatch)
    engine.step = small
    got = engine.capture(TEXTS, what="attention")
    assert small.sizes == [8, 4, 2, 2, 4, 2, 2]  # 8 -> 4 + 4, each -> 2 + 2
    want = engines["bert"].capture(TEXTS, what="attention")
    for a, b in zip(got, want, strict=True):
        assert a.tokens == b.tokens
        np.testing.assert_allclose(a.attention, b.attention, rtol=1e-5, atol=1e-6)


def test_an_example_too_large_alone_is_a_clear_error(bert_checkpoint):
    engine = jaxattn.load(bert_checkpoint)
    engine.step = SmallDevice(engine.step, limit=0, at_dispatch=True)
    with pytest.raises(DeviceMemoryError, match="does not fit the device's memory even alone"):
        engine.capture(TEXTS[:3], what="attention")


def test_other_engine_errors_are_not_mistaken_for_memory(bert_checkpoint):
    engine = jaxattn.load(bert_checkpoint)

    def broken(*args):
        raise jax.errors.JaxRuntimeError("INTERNAL: something else")

    engine.step = type(
        "Broken", (), {"__call__": staticmethod(broken), "place": engine.step.place}
    )()
    with pytest.raises(jax.errors.JaxRuntimeError, match="INTERNAL"):
        engine.capture(TEXTS[:1])
