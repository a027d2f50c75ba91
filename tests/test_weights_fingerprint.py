"""The weights' fingerprint is made at load, in a thread of its own (not at the first
capture's first hand-over), is the fingerprint of the weights the engine holds (the
checkpoint's, whichever layer loop placed them), and copies them to the host one tensor at
a time."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import tracemalloc

import numpy as np
import pytest
from hf_fixtures import make_checkpoint
from tiny_models import config_of, params_of
from xla_env import flags

import jaxattn
from jaxattn.checkpoints import read_checkpoint
from jaxattn.engine import engine as engine_module
from jaxattn.engine import step as step_module
from jaxattn.engine.params import fingerprint

# A BERT whose feed-forward kernels [48, 384] are the largest tensors, an eighth of the
# weights (six layers): a copy of the whole tree is eight of them.
WIDE = dict(hidden_size=48, num_attention_heads=3, intermediate_size=384, num_hidden_layers=6)


def test_the_fingerprint_is_made_after_load_without_being_asked_for(bert_checkpoint, monkeypatch):
    made, where = threading.Event(), []

    def watched(step):
        where.append(threading.current_thread().name)
        try:
            return engine_module.fingerprint_tensors(*step.canonical_tensors())
        finally:
            made.set()

    monkeypatch.setattr(engine_module, "fingerprint_of", watched)
    engine = jaxattn.load(bert_checkpoint)
    # Nothing asks for it: no capture, no info. It is made all the same, off this thread.
    assert made.wait(60)
    assert where == ["jaxattn-fingerprint"]
    assert engine.weights_fingerprint == fingerprint(engine.step.canonical_params())
    assert engine.info.weights == engine.weights_fingerprint
    assert where == ["jaxattn-fingerprint"]  # made once


def test_a_fingerprint_that_cannot_be_made_fails_where_it_is_asked_for(
    bert_checkpoint, monkeypatch
):
    def broken(step):
        raise OSError("the weights could not be read")

    monkeypatch.setattr(engine_module, "fingerprint_of", broken)
    engine = jaxattn.load(bert_checkpoint)  # the load itself does not fail
    with pytest.raises(OSError, match="the weights could not be read"):
        _ = engine.weights_fingerprint
    with pytest.raises(OSError, match="the weights could not be read"):
        engine.capture(["a short text"], what=("attention",))


def by_hand(tree: dict) -> str:
    """The fingerprint as defined (docs/reference: "blake2b:" and 32 hex digits), here:
    BLAKE2b-128 over each tensor's "name|dtype|shape" line and bytes, in name order."""
    flat: dict = {}

    def walk(node: dict, prefix: str) -> None:
        for k, v in node.items():
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}/")
            else:
                flat[f"{prefix}{k}"] = np.ascontiguousarray(v)

    walk(tree, "")
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(flat):
        a = flat[name]
        h.update(f"{name}|{a.dtype.str}|{a.shape}\n".encode() + a.tobytes())
    return "blake2b:" + h.hexdigest()


@pytest.fixture(scope="module")
def wide_bert(tmp_path_factory):
    return make_checkpoint("bert", tmp_path_factory.mktemp("wide") / "bert", **WIDE)


@pytest.mark.parametrize("loop", ["scan", "unrolled"])
def test_the_fingerprint_is_the_checkpoints_weights_hashed(wide_bert, loop):
    engine = jaxattn.load(wide_bert, buckets=(16,), layer_loop=loop)
    _, params = read_checkpoint(wide_bert)  # on the host, neither stacked nor placed
    assert engine.step.layer_loop == loop
    assert engine.weights_fingerprint == by_hand(params["encoder"])
    assert fingerprint(params["encoder"]) == by_hand(params["encoder"])


@pytest.mark.parametrize("loop", ["scan", "unrolled"])
def test_the_fingerprint_copies_one_tensor_at_a_time(wide_bert, loop, monkeypatch):
    # As on a GPU, every tensor asked for is a copy (a CPU's arrays are viewed, and a
    # stacked layer sliced from views), which tracemalloc sees (numpy's allocations).
    monkeypatch.setattr(step_module, "host_views", lambda a: False)
    engine = jaxattn.load(wide_bert, buckets=(16,), layer_loop=loop)
    made = engine.weights_fingerprint  # its programs compiled (a stacked layer's slice)
    sizes = [a.nbytes for a in jax_leaves(engine.step.canonical_params())]
    largest, total = max(sizes), sum(sizes)
    assert total >= 7 * largest  # the model is as meant: a tree copy shows
    monkeypatch.setattr(step_module, "to_host", lambda a: np.array(a, copy=True))
    again, peak = traced_fingerprint(engine)
    assert again == made
    assert largest <= peak < 2 * largest, (peak, largest, total)


def traced_fingerprint(engine) -> tuple[str, int]:
    """The engine's fingerprint made again, and the peak of numpy's allocations meanwhile."""
    tracemalloc.start()
    try:
        made = engine_module.fingerprint_of(engine.step)
        return made, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def jax_leaves(tree: dict) -> list:
    return [a for v in tree.values() for a in (jax_leaves(v) if isinstance(v, dict) else [v])]


def test_a_device_without_room_for_a_layer_still_gets_its_fingerprint(wide_bert, monkeypatch):
    """A stacked layer's weights are sliced out on the device, which takes room there:
    room a capture running beside the fingerprint's thread may hold (its batches run up
    to the device's memory, and again in halves where past it). Out of memory there, the
    stacked weights are copied to the host whole instead (as the fingerprint did before
    copying one tensor at a time), not the engine's fingerprint, and every capture,
    failed for good; other errors are not hidden."""
    import jax

    engine = jaxattn.load(wide_bert, buckets=(16,), layer_loop="scan")
    _, params = read_checkpoint(wide_bert)
    assert engine.weights_fingerprint == by_hand(params["encoder"])
    sliced, real = [], step_module._layer_weights

    def failing(error: str):
        def slice_here(stacked, i):  # here only: another test's engine's thread slices as ever
            if threading.current_thread() is not threading.main_thread():
                return real(stacked, i)
            sliced.append(int(i))
            raise jax.errors.JaxRuntimeError(error)

        return slice_here

    full = failing("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 41472 bytes")
    monkeypatch.setattr(step_module, "host_views", lambda a: False)  # as on a GPU
    monkeypatch.setattr(step_module, "_layer_weights", full)
    assert engine_module.fingerprint_of(engine.step) == by_hand(params["encoder"])
    assert sliced == [0]  # tried once, not again for each layer

    monkeypatch.setattr(step_module, "_layer_weights", failing("INTERNAL: the device is gone"))
    with pytest.raises(jax.errors.JaxRuntimeError, match="the device is gone"):
        engine_module.fingerprint_of(engine.step)


def test_on_the_cpu_a_stacked_layer_is_sliced_from_views_not_by_a_program(wide_bert, monkeypatch):
    """A CPU's placed weights are host memory: the fingerprint slices a stacked layer out
    of views of them, with no program and no copy, and hashes the same weights."""
    engine = jaxattn.load(wide_bert, buckets=(16,), layer_loop="scan")
    _, params = read_checkpoint(wide_bert)
    assert engine.weights_fingerprint == by_hand(params["encoder"])
    largest = max(a.nbytes for a in jax_leaves(engine.step.canonical_params()))

    def no_program(stacked, i):
        raise AssertionError("a stacked layer sliced by a program on the CPU")

    monkeypatch.setattr(step_module, "_layer_weights", no_program)
    again, peak = traced_fingerprint(engine)
    assert again == by_hand(params["encoder"])
    assert peak < largest / 2, (peak, largest)  # no tensor copied, let alone a layer


# Layer 0 outside the stack (ModernBERT's: pre-LN, no attention LayerNorm), alone (one
# layer: nothing stacked), GQA: each model's steps on four devices, scanned and unrolled.
MESHED = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import jax
    from tiny_models import config_of, params_of
    from jaxattn.engine.engine import fingerprint_of
    from jaxattn.engine.step import CaptureStep
    assert jax.local_device_count() == 4, jax.local_devices()
    made = {}
    for family, layers in json.loads(sys.argv[2]):
        config = config_of(family, num_hidden_layers=layers)
        for loop in ("scan", "unrolled"):
            step = CaptureStep(config, params_of(config), jax.devices(), layer_loop=loop)
            made[f"{family}-{layers}-{loop}"] = fingerprint_of(step)
    print(json.dumps(made))
    """
)


def test_the_fingerprint_is_the_weights_hashed_on_a_mesh_whatever_is_stacked():
    models = [("modernbert", 3), ("modernbert", 1), ("llama", 2)]
    env = dict(os.environ, XLA_FLAGS=flags("--xla_force_host_platform_device_count=4"))
    env["JAX_PLATFORMS"] = "cpu"
    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run(
        [sys.executable, "-c", MESHED, here, json.dumps(models)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    made = json.loads(proc.stdout.strip().splitlines()[-1])
    want = {}
    for family, layers in models:
        hashed = by_hand(params_of(config_of(family, num_hidden_layers=layers)))
        want |= {f"{family}-{layers}-{loop}": hashed for loop in ("scan", "unrolled")}
    assert made == want
