"""Layer groups under the bad cases (issue 31, review): a layer group that runs out of
device memory is a clear error naming the group, its layers and what helps, never a
raw XLA error (a grouped example is not retried in halves); `run(skip=)` stops an
example's remaining groups once its reader left; and the groups equal the one program
for a Mistral whose sliding window cuts the rows, with GQA, heads and query rows, at
bf16 and highest precision (warmup: test_layer_groups_warmup.py).
A tiny random BERT (3 layers x 3 heads, D = 15) unless said."""

from __future__ import annotations

import jax
import pytest
from device_failures import FailingFetch

import jaxattn
from jaxattn.errors import DeviceMemoryError

LONG = "the quick brown fox jumps over the lazy dog"  # 11 tokens: bucket 16
ASK = dict(what=("attention", "hidden_states"), layers=[0, 1, 2], heads=[0, 2])
OOM = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.0GiB"


@pytest.fixture(scope="module")
def engine(bert_checkpoint):
    # 2,500 bytes: one layer of ASK at 16 tokens fits (2 heads x 16 x 16 x 4 + hidden
    # states), all three do not: three groups of one layer
    return jaxattn.load(bert_checkpoint, output_budget=2500, buckets=(16, 24))


@pytest.mark.parametrize("at_dispatch", [True, False])
def test_a_layer_group_out_of_memory_is_a_clear_error_naming_the_group(
    engine, at_dispatch, monkeypatch
):
    spec = engine.make_spec(**ASK)
    assert engine.pipeline.group_sizes(engine.tokenize([LONG]), spec) == [1]
    group, calls = engine.step.group, []

    def second_fails(spec, span, *rest, **kw):
        calls.append(span)
        if span != (1, 2):
            return group(spec, span, *rest, **kw)
        error = jax.errors.JaxRuntimeError(OOM)
        if at_dispatch:
            raise error
        out, x = group(spec, span, *rest, **kw)
        return {"attention": {"data": FailingFetch(error)}}, x

    monkeypatch.setattr(engine.step, "group", second_fails)
    with pytest.raises(DeviceMemoryError) as caught:
        engine.capture([LONG], **ASK)
    message = str(caught.value)
    assert message.startswith("layer group 2 of 3 (layers 1-1, capturing 1) of an example of 11 ")
    assert "RESOURCE_EXHAUSTED" in message and "shorter texts" in message
    assert calls[:2] == [(0, 1), (1, 2)]  # not retried


def test_other_errors_in_a_layer_group_are_not_mistaken_for_memory(engine, monkeypatch):
    def broken(*args, **kw):
        raise jax.errors.JaxRuntimeError("INTERNAL: something else")

    monkeypatch.setattr(engine.step, "group", broken)
    with pytest.raises(jax.errors.JaxRuntimeError, match="INTERNAL"):
        engine.capture([LONG], **ASK)


@pytest.mark.parametrize("attention, precision", [("dense", "bf16"), ("blockwise", "highest")])
def test_groups_equal_the_one_program_with_a_window_that_bites_gqa_and_precision(
    attention, precision
):
    # tests/test_layer_groups.py's Mistral (T = 29) never reaches its 37-token window:
    # here a 6-token window cuts every row past 6, with 4 query heads on 1 key/value
    # head, heads and query rows selected, at each compute precision.
    import numpy as np
    from test_layer_groups import grouped, inputs
    from tiny_models import config_of, params_of

    from jaxattn.engine.step import CaptureStep
    from jaxattn.spec import CaptureSpec

    config = config_of("mistral", num_hidden_layers=3, sliding_window=6)
    step = CaptureStep(
        config, params_of(config), jax.devices()[:1], "device", "unrolled", attention, block=11
    )
    spec = CaptureSpec(
        what=("attention", "keys", "hidden_states"),
        layers=(0, 1, 2),
        heads=(0, 3),
        kv_heads=(0,),
        query_positions=(-1, 0, 16),
        precision=precision,
    )
    arrays = step.place(*inputs(config, spec))
    whole = {name: np.asarray(o["data"]) for name, o in step(spec, *arrays).items()}
    parts = grouped(step, spec, arrays, 2)
    for name in spec.what:
        assert parts[name].shape == whole[name].shape, name
        np.testing.assert_allclose(parts[name], whole[name], rtol=2e-5, atol=2e-6, err_msg=name)
    rows = whole["attention"][0]  # [L, heads, rows 0, 16 and 28 (ascending), T]
    assert np.all(rows[:, :, 1, 11:17] > 0)  # row 16 sees its last 6 keys only
    assert np.all(rows[:, :, 1, :11] == 0) and np.all(rows[:, :, 1, 17:] == 0)


def test_skip_stops_an_examples_remaining_groups(engine, monkeypatch):
    # A server's cancelled call (service/micro_batching.py): asked before each group,
    # True stops that example (what is in flight dropped); the next example runs whole.
    spec = engine.make_spec(**ASK)
    group, spans = engine.step.group, []

    def counted(spec, span, *rest, **kw):
        spans.append(span)
        return group(spec, span, *rest, **kw)

    monkeypatch.setattr(engine.step, "group", counted)
    got = []

    def skip(pos):
        return pos == 0 and bool(got)  # example 0's reader left once it had a group

    tokenized = engine.tokenize([LONG, LONG])
    for pos, part in engine.run(tokenized, spec, parts=True, skip=skip):
        got.append((pos, part.part))
    assert got == [(0, 0), (1, 0), (1, 1), (1, 2)]
    assert spans == [(0, 1), (1, 2), (0, 1), (1, 2), (2, 3)]  # two in flight, then none


def test_capture_layers_lets_each_part_go_once_the_next_is_asked_for(engine):
    # The host holds a group at a time: nothing in the engine keeps a part the consumer
    # dropped (weak references to each part's tensors die once the next part is out).
    import gc
    import weakref

    parts = engine.capture_layers([LONG, "hello world"], **ASK)
    refs, seen = [], []
    for index, part in parts:
        gc.collect()
        assert all(r() is None for r in refs), seen  # every earlier part let go
        refs = [weakref.ref(t) for t in part.tensors.values()]
        seen.append((index, part.part))
        del part
    assert seen == [(i, k) for i in range(2) for k in range(3)]
