"""Layer groups under the bad cases (issue 31, review): a layer group that runs out of
device memory is a clear error naming the group, its layers and what helps, never a
raw XLA error (a grouped example is not retried in halves); `Engine.warmup` compiles
the layer-group programs of the buckets whose examples run in groups, so the first
long request compiles nothing; `run(skip=)` stops an example's remaining groups once
its reader left; and the groups equal the one program for a Mistral whose sliding
window cuts the rows, with GQA, heads and query rows, at bf16 and highest precision.
A tiny random BERT (3 layers x 3 heads, D = 15) unless said."""

from __future__ import annotations

import jax
import pytest
from compile_events import backend_compiles
from device_failures import FailingFetch

import jaxattn
from jaxattn.errors import DeviceMemoryError

LONG = "the quick brown fox jumps over the lazy dog"  # 11 tokens: bucket 16
ASK = dict(what=("attention", "hidden_states"), layers=[0, 1, 2], heads=[0, 2])
OOM = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.0GiB"


@pytest.fixture
def engine(bert_checkpoint):
    # 2,500 bytes: one layer of ASK at 16 tokens fits (2 heads x 16 x 16 x 4 + hidden
    # states), all three do not: three groups of one layer
    return jaxattn.load(bert_checkpoint, output_budget=2500, buckets=(16, 24))


@pytest.mark.parametrize("at_dispatch", [True, False])
def test_a_layer_group_out_of_memory_is_a_clear_error_naming_the_group(engine, at_dispatch):
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

    engine.step.group = second_fails
    with pytest.raises(DeviceMemoryError) as caught:
        engine.capture([LONG], **ASK)
    message = str(caught.value)
    assert message.startswith("layer group 2 of 3 (layers 1-1, capturing 1) of an example of 11 ")
    assert "RESOURCE_EXHAUSTED" in message and "shorter texts" in message
    assert calls[:2] == [(0, 1), (1, 2)]  # not retried


def test_other_errors_in_a_layer_group_are_not_mistaken_for_memory(engine):
    def broken(*args, **kw):
        raise jax.errors.JaxRuntimeError("INTERNAL: something else")

    engine.step.group = broken
    with pytest.raises(jax.errors.JaxRuntimeError, match="INTERNAL"):
        engine.capture([LONG], **ASK)


@pytest.mark.parametrize("loop", ["unrolled", "scan"])
def test_warmup_compiles_the_layer_group_programs(bert_checkpoint, loop):
    engine = jaxattn.load(bert_checkpoint, output_budget=2500, buckets=(16, 24), layer_loop=loop)
    spec = engine.make_spec(**ASK)
    tokenized = engine.tokenize([LONG, LONG + " " + LONG])  # 11 and 20 tokens: 16 and 24
    assert engine.pipeline.group_sizes(tokenized, spec) == [1, 1]
    warmed = engine.warmup(spec)
    with backend_compiles() as compiles:
        got = engine.capture([LONG, LONG + " " + LONG], **ASK)
    assert compiles == []  # warmup compiled every group program the calls ran
    assert engine.compiled_shapes == warmed
    assert [g.tensors["attention"].shape for g in got] == [(3, 2, 11, 11), (3, 2, 20, 20)]


def test_warmup_with_group_bytes_compiles_what_a_server_runs(bert_checkpoint):
    engine = jaxattn.load(bert_checkpoint, buckets=(16, 24))  # a budget no example exceeds
    spec = engine.make_spec(**ASK)
    limit = engine.output_bytes(spec, 24) - 1  # as a server's max_example_bytes
    sizes = engine.pipeline.group_sizes(engine.tokenize([LONG]), spec, limit)
    assert sizes == [0]  # 16 tokens fit, 24 run in groups
    engine.warmup(spec, group_bytes=limit)
    text = LONG + " " + LONG
    with backend_compiles() as compiles:
        parts = list(engine.run(engine.tokenize([text]), spec, parts=True, group_bytes=limit))
        engine.capture([LONG], **ASK)
    assert len(parts) > 1 and compiles == []


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


def test_skip_stops_an_examples_remaining_groups(engine):
    # A server's cancelled call (service/micro_batching.py): asked before each group,
    # True stops that example (what is in flight dropped); the next example runs whole.
    spec = engine.make_spec(**ASK)
    group, spans = engine.step.group, []

    def counted(spec, span, *rest, **kw):
        spans.append(span)
        return group(spec, span, *rest, **kw)

    engine.step.group = counted
    got = []

    def skip(pos):
        return pos == 0 and bool(got)  # example 0's reader left once it had a group

    tokenized = engine.tokenize([LONG, LONG])
    for pos, part in engine.run(tokenized, spec, parts=True, skip=skip):
        got.append((pos, part.part))
    assert got == [(0, 0), (1, 0), (1, 1), (1, 2)]
    assert spans == [(0, 1), (1, 2), (0, 1), (1, 2), (2, 3)]  # two in flight, then none
