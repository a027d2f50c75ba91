"""Where the step's outputs land (pinned host or device memory) and Captures as views of them."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hf_fixtures import EXAMPLE_A, EXAMPLE_B

import jaxattn
from jaxattn.engine import batching, host
from jaxattn.engine.step import resolve_host_memory
from jaxattn.errors import UsageError

TEXTS = [EXAMPLE_A, (EXAMPLE_A, EXAMPLE_B), "", EXAMPLE_B]


@pytest.fixture(scope="module")
def pinned(bert_checkpoint):
    # One bucket for all of TEXTS: one compiled shape per (engine, dtype).
    return jaxattn.load(bert_checkpoint, host_memory="pinned", buckets=(24,))


@pytest.fixture(scope="module")
def device(bert_checkpoint):
    return jaxattn.load(bert_checkpoint, host_memory="device", buckets=(24,))


@pytest.fixture(scope="module")
def staged(bert_checkpoint):
    return jaxattn.load(bert_checkpoint, host_memory="staged", buckets=(24,))


def test_auto_is_device_memory_on_the_cpu_and_pinned_is_offered():
    cpus = jax.devices("cpu")
    assert resolve_host_memory("auto", cpus) == "device"
    assert resolve_host_memory("pinned", cpus) == "pinned"
    assert resolve_host_memory("staged", cpus) == "staged"
    with pytest.raises(UsageError, match="unknown host_memory 'fast': valid are auto, pinned"):
        resolve_host_memory("fast", cpus)


@pytest.mark.parametrize("policy", ["pinned", "staged"])
def test_pinned_and_staged_outputs_land_in_pinned_host_memory(policy, request):
    engine = request.getfixturevalue(policy)
    spec = engine.make_spec(("attention", "fx_norm"), dtype="uint8")
    batch = batching.Batch(8, 2, (0,))
    tokenized = engine.tokenize(TEXTS[:1])
    arrays = engine.step.place(*host.pack(batch, tokenized, engine.config, spec))
    out = engine.step(spec, *arrays)
    assert {leaf.sharding.memory_kind for leaf in jax.tree.leaves(out)} == {"pinned_host"}


def test_host_memory_without_pinned_memory_is_refused_by_name():
    class Memory:
        kind = "device"

    class Device:
        platform = "tpu"

        def addressable_memories(self):
            return [Memory()]

    with pytest.raises(UsageError, match="host_memory='staged': tpu devices here offer no"):
        resolve_host_memory("staged", [Device()])


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_pinned_device_and_staged_memory_give_identical_captures(pinned, device, staged, dtype):
    # A probability, an affine-quantised and an [L+1] quantity: every output path.
    what = ("attention", "fx_norm", "hidden_states")
    a = pinned.capture(TEXTS, what=what, dtype=dtype)
    for other in (device, staged):
        b = other.capture(TEXTS, what=what, dtype=dtype)
        for x, y in zip(a, b, strict=True):
            assert x.quantization == y.quantization
            for name in what:
                np.testing.assert_array_equal(x.tensors[name], y.tensors[name], err_msg=name)


def test_captures_are_views_of_one_batch_block(engines):
    """Trimming copies nothing: each array views the batch's host buffer."""
    caps = engines["bert"].capture(TEXTS, what=("attention", "hidden_states"))
    for cap in caps:
        for array in cap.tensors.values():
            assert not array.flags.owndata and array.base is not None
    # EXAMPLE_A and "" share a bucket, so a batch: their arrays sit in one block.
    byte_bounds = np.lib.array_utils.byte_bounds
    (lo_a, _), (lo_e, _) = byte_bounds(caps[0].attention), byte_bounds(caps[2].attention)
    layers, heads = caps[0].attention.shape[:2]
    row_bytes = layers * heads * 8 * 8 * 4  # one [L, H, 8, 8] float32 row of the bucket-8 block
    assert abs(lo_e - lo_a) == row_bytes  # adjacent rows of one block


def test_auto_stages_on_gpus_and_pins_on_tpus():
    # The H200 figures (BENCHMARKS.md, 2026-11-26) made "staged" the GPUs' choice.
    class Memory:
        def __init__(self, kind):
            self.kind = kind

    def device(platform, kinds=("device", "pinned_host")):
        return type(
            "Device",
            (),
            {"platform": platform, "addressable_memories": lambda _: [Memory(k) for k in kinds]},
        )()

    assert resolve_host_memory("auto", [device("gpu"), device("gpu")]) == "staged"
    assert resolve_host_memory("auto", [device("tpu")]) == "pinned"
    assert resolve_host_memory("auto", [device("gpu", ("device",))]) == "device"


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_the_pipeline_holds_depth_batches_in_flight_with_the_same_captures(staged, depth):
    """`BatchPipeline.depth` batches are dispatched before the oldest is handed over
    (gpu_checks.py overlap measures 3 against the default 2); the captures are equal."""
    import dataclasses

    pipeline = staged.pipeline
    budgets, dispatch, finish = pipeline.budgets, pipeline.dispatch, pipeline._finish
    events: list[str] = []

    def dispatched(*args, **kw):
        events.append("d")
        return dispatch(*args, **kw)

    def finished(*args, **kw):
        events.append("f")
        yield from finish(*args, **kw)

    texts = [EXAMPLE_A, EXAMPLE_B] * 4  # one bucket: 4 batches of 2
    try:
        pipeline.budgets = dataclasses.replace(budgets, max_batch=2, compile_tokens=0)
        want = staged.capture(texts, what="attention")  # the same batches, 2 in flight
        pipeline.depth, pipeline.dispatch, pipeline._finish = depth, dispatched, finished
        got = staged.capture(texts, what="attention")
    finally:
        pipeline.budgets, pipeline.depth = budgets, 2
        del pipeline.dispatch, pipeline._finish
    in_flight = [
        events[: k + 1].count("d") - events[: k + 1].count("f") for k in range(len(events))
    ]
    assert events.count("d") == events.count("f") == 4
    assert max(in_flight) == depth
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a.attention, b.attention)
