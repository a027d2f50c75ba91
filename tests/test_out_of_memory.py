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


OOM = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.0GiB"


class SmallDevice:
    """The engine's step, failing like XLA does for batches over `limit` rows, and for
    layer-group programs running more than `group_layers` layers (None: never)."""

    def __init__(self, step, limit: int, at_dispatch: bool, group_layers: int | None = None):
        self.step, self.limit, self.at_dispatch = step, limit, at_dispatch
        self.group_layers = group_layers
        self.place, self.params = step.place, step.params
        self.canonical_params = step.canonical_params
        self.sizes: list[int] = []
        self.spans: list[tuple[int, int]] = []

    def _fails(self):
        error = jax.errors.JaxRuntimeError(OOM)
        if self.at_dispatch:
            raise error
        return {"attention": {"data": FailingFetch(error)}}  # fails when fetched

    def __call__(self, spec, ids, *rest):
        self.sizes.append(ids.shape[0])
        if ids.shape[0] > self.limit:
            return self._fails()
        return self.step(spec, ids, *rest)

    def group(self, spec, span, *rest):
        self.spans.append(span)
        out, x = self.step.group(spec, span, *rest)
        if self.group_layers is not None and span[1] - span[0] > self.group_layers:
            return self._fails(), x
        return out, x


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


def _same(got, want):
    for a, b in zip(got, want, strict=True):
        assert a.tokens == b.tokens and sorted(a.tensors) == sorted(b.tensors)
        for name in a.tensors:
            np.testing.assert_allclose(a.tensors[name], b.tensors[name], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("at_dispatch", [True, False])
def test_an_example_too_large_alone_runs_in_layer_groups(bert_checkpoint, engines, at_dispatch):
    # Every one-program batch fails, even of one example: each example runs in layer
    # groups of 2 captured layers (half of 3, rounded up), whose programs fit.
    engine = jaxattn.load(bert_checkpoint)
    small = SmallDevice(engine.step, limit=0, at_dispatch=at_dispatch)
    engine.step = small
    ask = dict(what=("attention", "hidden_states", "alpha_fx_norm"), heads=[0, 2])
    got = engine.capture(TEXTS[:3], **ask)
    assert small.sizes == [4, 2, 1, 1, 1]  # 3 (+1 pad) -> 2 + 1 -> 1 + 1, then groups
    assert small.spans == [(0, 2), (2, 3)] * 3
    _same(got, engines["bert"].capture(TEXTS[:3], **ask))


@pytest.mark.parametrize("at_dispatch", [True, False])
def test_groups_halve_until_they_fit(bert_checkpoint, engines, at_dispatch):
    engine = jaxattn.load(bert_checkpoint)
    small = SmallDevice(engine.step, limit=0, at_dispatch=at_dispatch, group_layers=1)
    engine.step = small
    got = engine.capture(TEXTS[:1], what=("attention", "keys"))
    # 2 layers a group fail (found at dispatch, or at the fetch, the next group sent
    # meanwhile), then groups of 1 fit
    failed = [(0, 2)] if at_dispatch else [(0, 2), (2, 3)]
    assert small.spans == [*failed, (0, 1), (1, 2), (2, 3)]
    _same(got, engines["bert"].capture(TEXTS[:1], what=("attention", "keys")))


def test_an_example_too_large_even_in_groups_of_one_is_a_clear_error(bert_checkpoint):
    engine = jaxattn.load(bert_checkpoint)
    small = SmallDevice(engine.step, limit=0, at_dispatch=True, group_layers=0)
    engine.step = small
    with pytest.raises(DeviceMemoryError) as caught:
        engine.capture(TEXTS[:3], what="attention")
    message = str(caught.value)
    assert "does not fit the device's memory even alone, capturing attention, not even " in (
        message
    )
    assert "in layer groups of one captured layer" in message and "RESOURCE_EXHAUSTED" in message
    assert small.spans == [(0, 2), (0, 1)]  # each size fails at its first group


@pytest.mark.parametrize(
    "load, ask",
    [
        ({}, dict(layers=[1])),  # one captured layer: groups cannot help
        ({"layer_group": 0}, {}),  # the engine told never to group
        ({}, dict(what=("attention", "keys"), dtype="uint8")),  # keys' one range: all layers
    ],
)
def test_an_example_too_large_alone_is_a_clear_error(bert_checkpoint, load, ask):
    engine = jaxattn.load(bert_checkpoint, **load)
    small = SmallDevice(engine.step, limit=0, at_dispatch=True)
    engine.step = small
    with pytest.raises(DeviceMemoryError, match="does not fit the device's memory even alone"):
        engine.capture(TEXTS[:3], **{"what": "attention", **ask})
    assert small.spans == []


def test_other_engine_errors_are_not_mistaken_for_memory(bert_checkpoint):
    engine = jaxattn.load(bert_checkpoint)

    def broken(*args):
        raise jax.errors.JaxRuntimeError("INTERNAL: something else")

    engine.step = type(
        "Broken", (), {"__call__": staticmethod(broken), "place": engine.step.place}
    )()
    with pytest.raises(jax.errors.JaxRuntimeError, match="INTERNAL"):
        engine.capture(TEXTS[:1])
