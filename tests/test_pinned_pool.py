"""Results held past XLA's pinned host pool: copied out past a budget, refused up front
where they cannot fit the host, and the pool's exhaustion an error at once, not halved."""

from __future__ import annotations

import dataclasses
import gc
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from device_failures import FailingFetch

import jaxattn
from jaxattn.capture import bulk
from jaxattn.cli import explain
from jaxattn.engine import host, oom
from jaxattn.errors import DeviceMemoryError, HostMemoryError, JaxattnError
from service.admitted_call import engine_failure

WORDS = "i went to the store and bought fresh strawberries at the market".split()
TEXTS = [" ".join(WORDS[: 3 + i % 4]) for i in range(8)]  # 5-8 tokens: one bucket of 24
# One batch's attention block, by hand: 2 rows x 3 layers x 3 heads x 24 x 24 float32.
BLOCK = 2 * 3 * 3 * 24 * 24 * 4
POOL_OOM = (
    "RESOURCE_EXHAUSTED: Out of host memory while trying to allocate 2.25GiB with "
    "allocator xla_gpu_host_bfc"
)


@pytest.fixture(scope="module")
def pinned(bert_checkpoint):
    """Outputs in the CPU's pinned host memory; 8 texts -> 4 batches of 2."""
    engine = jaxattn.load(bert_checkpoint, host_memory="pinned", buckets=(24,))
    engine.pipeline.budgets = dataclasses.replace(
        engine.budgets, max_batch=2, pad_fraction=0.0, compile_tokens=0
    )
    return engine


@pytest.fixture
def blocks(monkeypatch):
    """Every host block the step's outputs land in, as numpy arrays."""
    seen: list[np.ndarray] = []
    landed = host.host_blocks

    def recording(out):
        got = landed(out)
        seen.extend(part for parts in got.values() for b in parts.values() for _, part in b.parts)
        return got

    monkeypatch.setattr(host, "host_blocks", recording)
    return seen


def _views(cap, seen) -> bool:
    return any(np.shares_memory(cap.attention, part) for part in seen)


@pytest.fixture
def budget(pinned):
    yield pinned.pipeline
    pinned.pipeline.pinned_budget = None


def test_past_the_budget_captures_are_copied_out_bit_for_bit(pinned, budget, blocks):
    want = pinned.capture(TEXTS)  # no budget on the CPU: every Capture views its block
    assert all(_views(cap, blocks) for cap in want)
    blocks.clear()
    budget.pinned_budget = 2 * BLOCK  # two batches' blocks stay, two are copied
    got = pinned.capture(TEXTS)
    assert len(blocks) == 4
    viewing = [_views(cap, blocks) for cap in got]
    assert viewing.count(True) == viewing.count(False) == 4
    for cap, views, ref in zip(got, viewing, want, strict=True):
        a = cap.attention
        assert a.tobytes() == ref.attention.tobytes() and a.dtype == ref.attention.dtype
        assert not a.flags.writeable
        if not views:  # its own memory, no block behind it
            assert a.flags.owndata and a.base is None


def test_copying_out_a_capture_uses_the_copy_pool_bit_for_bit(pinned, copy_threads, monkeypatch):
    """`host.copied`: each array past the copy pool's bound (made 512 bytes) copied by
    its threads into memory of its own, read-only, equal bit for bit to the view."""
    monkeypatch.setattr(bulk, "POOL_MIN", 512)
    monkeypatch.setattr(bulk, "PIECE_BYTES", 256)
    (cap,) = pinned.capture(TEXTS[:1], what=("attention", "hidden_states"))
    own = host.copied(cap)
    assert any(t.startswith("jaxattn-copy") for t in copy_threads)
    for name, t in cap.tensors.items():
        got = own.tensors[name]
        assert got.tobytes() == t.tobytes() and got.dtype == t.dtype, name
        assert got.flags.owndata and not got.flags.writeable
        assert not np.shares_memory(got, t)


def test_the_budget_counts_the_views_earlier_calls_left_until_they_are_let_go(
    pinned, budget, blocks
):
    """The half of the pool is the process's, not each call's: the views an earlier
    capture's results (or a kept stream's) still hold count against it, and no longer
    once they are let go. Two captures each keeping half the pool filled it."""
    budget.pinned_budget = 2 * BLOCK

    def viewing(caps) -> int:
        got = sum(_views(cap, blocks) for cap in caps)
        blocks.clear()  # the fixture's own references to the blocks let go too
        return got

    first = pinned.capture(TEXTS)
    assert viewing(first) == 4  # two batches of two kept as views, two copied out
    second = pinned.capture(TEXTS)
    assert viewing(second) == 0  # the first's views fill the budget: every batch copied
    del first, second
    gc.collect()
    kept = list(pinned.stream(TEXTS))  # a stream's views, kept by its reader
    assert viewing(kept) == 8
    assert viewing(pinned.capture(TEXTS)) == 0
    del kept
    gc.collect()
    assert viewing(pinned.capture(TEXTS)) == 4  # all let go: the budget is free again


def test_the_held_results_count_the_blocks_kept_and_copied(pinned):
    spec = pinned.make_spec("attention")
    kept = pinned.tokenize(TEXTS)
    held = host.HeldResults(budget=3 * BLOCK - 1)
    caps = dict(pinned.run(kept, spec, held=held))
    assert len(caps) == 8
    assert (held.pinned, held.copied) == (2 * BLOCK, 2 * BLOCK)


def test_a_stream_keeps_its_captures_pinned_whatever_the_budget(pinned, budget, blocks):
    budget.pinned_budget = 0
    assert all(_views(cap, blocks) for cap in pinned.stream(TEXTS))
    assert not any(_views(cap, blocks) for cap in pinned.capture(TEXTS))


def test_results_over_the_hosts_available_memory_are_refused_before_anything_runs(pinned):
    pipeline, calls = pinned.pipeline, []
    step = pipeline.step
    pipeline.available_bytes = lambda: 1000
    pipeline.step = lambda *a: calls.append(a)
    try:
        with pytest.raises(HostMemoryError) as caught:
            pinned.capture(TEXTS)
    finally:
        pipeline.step, pipeline.available_bytes = step, host.available_bytes
    # each text's attention trimmed to its length: 3 x 3 x T x T float32, T = 5..8
    total = 2 * sum(9 * t * t * 4 for t in (5, 6, 7, 8))
    message = str(caught.value)
    assert f"come to {total / 1000:.1f} kB ({total} bytes)" in message
    assert "available memory (1.0 kB, 1000 bytes: MemAvailable" in message
    assert "capture_iter, stream, or jaxattn dump" in message
    assert calls == []


def test_available_memory_is_memavailable(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 9999 kB\nMemFree: 5 kB\nMemAvailable:    1234 kB\n")
    no_cgroup = str(tmp_path / "none"), str(tmp_path / "none")  # (tests/test_cgroup_memory.py)

    def available(path):
        return host.available_bytes(str(path), *no_cgroup)

    assert available(meminfo) == 1234 * 1024
    assert available(tmp_path / "none") is None
    # a kernel before 3.14 (no MemAvailable), or a line it cannot read: unknown, not 0
    meminfo.write_text("MemTotal: 9999 kB\nMemFree: 5 kB\n")
    assert available(meminfo) is None
    meminfo.write_text("MemAvailable: lots\n")
    assert available(meminfo) is None


def test_the_budget_is_half_the_gpu_pool_and_none_without_one():
    gpu, cpu = (type("D", (), {"platform": p})() for p in ("gpu", "cpu"))
    gib = 1 << 30
    assert host.pinned_budget([gpu], "staged", {}) == 32 * gib
    env = {"XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB": "16"}
    assert host.pinned_budget([gpu, gpu], "pinned", env) == 8 * gib
    assert host.pinned_budget([gpu], "pinned", {"XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB": "x"}) == (
        32 * gib
    )
    assert host.pinned_budget([gpu], "device", {}) is None
    assert host.pinned_budget([cpu], "pinned", {}) is None


def test_the_pool_size_is_the_variable_as_it_was_when_the_backend_started(monkeypatch, recwarn):
    """XLA reads XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB once, as the GPU's client starts: set
    afterwards it no longer sizes the pool, and jaxattn keeps to the value it had then
    (a budget past XLA's pool fills it), warning once, naming the variable and both."""
    started = [False]
    monkeypatch.setattr(host, "backend_started", lambda: started[0])
    monkeypatch.setattr(host, "POOL", host.PoolSize())
    gpu = type("D", (), {"platform": "gpu"})()
    gib = 1 << 30
    monkeypatch.setenv(host.POOL_LIMIT_ENV, "16")
    assert host.pool_gb() == 16
    monkeypatch.setenv(host.POOL_LIMIT_ENV, "24")  # before the backend starts: XLA's to read
    assert host.pool_gb() == 24
    started[0] = True
    assert host.pool_gb() == 24 and host.pinned_budget([gpu], "pinned") == 12 * gib
    assert not recwarn.list
    monkeypatch.setenv(host.POOL_LIMIT_ENV, "8")  # too late: the pool is 24 GiB
    with pytest.warns(RuntimeWarning) as caught:
        assert host.pool_gb() == 24
    assert [str(w.message) for w in caught] == [
        "XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB is '8' now, but XLA sized its pinned host pool "
        "when jax's backend started, at 24 GiB: jaxattn keeps to 24 GiB; set the variable "
        "before jax starts (before jaxattn.load) to change the pool"
    ]
    recwarn.clear()
    assert host.pinned_budget([gpu], "pinned") == 12 * gib  # (24 GiB / 2)
    assert host.in_flight_room(12 * gib, 2) == 6 * gib  # (24 - 12) / 2
    full = oom.pool_full(jax.errors.JaxRuntimeError(POOL_OOM), None)
    assert str(full).startswith("XLA's pinned host memory pool (xla_gpu_host_bfc, 24 GiB: ")
    monkeypatch.delenv(host.POOL_LIMIT_ENV)
    assert host.pool_gb() == 24
    assert not recwarn.list  # warned once


def test_an_engine_reads_the_pool_size_as_its_devices_start(bert_checkpoint, monkeypatch):
    """Making an engine is where jaxattn's process starts jax's backend: the pool's size
    is read there, whatever the devices (the CPU's pipeline asks for no budget)."""
    monkeypatch.setattr(host, "POOL", host.PoolSize())
    monkeypatch.setenv(host.POOL_LIMIT_ENV, "12")
    jaxattn.load(bert_checkpoint, buckets=(24,))
    assert host.POOL.started_gb == 12


def test_a_process_keeps_the_value_its_backend_started_with():
    """The real backend (the CPU's, here) and jax's own word that it started: read as an
    engine is made (right after its devices start the backend), the variable set
    afterwards changes nothing jaxattn counts, and is warned of."""
    script = (
        "import os, jax\n"
        "from jaxattn.engine import host\n"
        "print(host.backend_started(), host.pool_gb())\n"
        "jax.devices()\n"
        "host.pool_gb()\n"  # Engine.__init__'s read
        "os.environ[host.POOL_LIMIT_ENV] = '4'\n"
        "print(host.backend_started(), host.pool_gb(), host.pool_gb(dict(os.environ)))\n"
    )
    env = {**os.environ, host.POOL_LIMIT_ENV: "16", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["False 16", "True 16 4"]
    assert "XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB is '4' now" in done.stderr


class PoolFull:
    """The engine's step, failing as XLA's full pinned pool does from batch `at` on."""

    def __init__(self, step, at: int, at_dispatch: bool):
        self.step, self.at, self.at_dispatch = step, at, at_dispatch
        self.place, self.params = step.place, step.params
        self.canonical_params = step.canonical_params
        self.sizes: list[int] = []

    def __call__(self, spec, ids, *rest):
        self.sizes.append(ids.shape[0])
        if len(self.sizes) < self.at:
            return self.step(spec, ids, *rest)
        error = jax.errors.JaxRuntimeError(POOL_OOM)
        if self.at_dispatch:
            raise error
        return {"attention": {"data": FailingFetch(error)}}


@pytest.mark.parametrize("at_dispatch", [True, False])
def test_a_full_pinned_pool_is_a_clear_error_not_halved(pinned, pinned_pool_gb, at_dispatch):
    pinned_pool_gb(16)
    step = pinned.step
    pinned.step = full = PoolFull(step, at=3, at_dispatch=at_dispatch)
    try:
        with pytest.raises(HostMemoryError) as caught:
            pinned.capture(TEXTS)
    finally:
        pinned.step = step
    # batches 1-2 ran; 3 failed; no halves of 1 (nor 4: failed at its fetch, sent meanwhile)
    assert full.sizes == ([2, 2, 2] if at_dispatch else [2, 2, 2, 2])
    message = str(caught.value)
    assert message.startswith(
        "XLA's pinned host memory pool (xla_gpu_host_bfc, 16 GiB: "
        "XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB) is full; this call's results hold up to "
        f"{2 * BLOCK / 1000:.1f} kB of it (RESOURCE_EXHAUSTED: Out of host memory"
    )
    assert "capture_iter, stream, or jaxattn dump" in message
    assert isinstance(caught.value, MemoryError) and isinstance(caught.value, JaxattnError)
    assert explain(caught.value) == (1, message)


def test_a_full_pool_names_what_earlier_calls_captures_still_view(pinned, budget, blocks):
    budget.pinned_budget = 2 * BLOCK
    earlier = pinned.capture(TEXTS[:4])  # two batches, kept as views
    step = pinned.step
    pinned.step = PoolFull(step, at=2, at_dispatch=True)
    try:
        with pytest.raises(HostMemoryError) as caught:
            pinned.capture(TEXTS)
    finally:
        pinned.step = step
    # the earlier call's two blocks fill the budget: this call's one batch that ran was
    # copied out, and the message says what fills the pool
    assert (
        f"is full; this call's results hold up to 0 B of it (and {BLOCK / 1000:.1f} kB more, "
        f"copied out of it); Captures kept from earlier calls view {2 * BLOCK / 1000:.1f} kB "
        "more (RESOURCE_EXHAUSTED"
    ) in str(caught.value)
    assert len(earlier) == 4


def test_a_full_pool_with_no_earlier_captures_names_none(pinned, budget):
    """This call's own views are not 'earlier calls'' (affine uint8: the blocks' scales
    and offsets are counted, then let go as no Capture views them)."""
    budget.pinned_budget = 1 << 40
    step = pinned.step
    pinned.step = PoolFull(step, at=3, at_dispatch=True)
    try:
        with pytest.raises(HostMemoryError) as caught:
            pinned.capture(TEXTS, what=("attention", "hidden_states"), dtype="uint8")
    finally:
        pinned.step = step
    assert "this call's results hold up to" in str(caught.value)
    assert "earlier calls" not in str(caught.value)


def test_a_full_pinned_pool_in_a_layer_group_is_the_same_error(pinned):
    step = pinned.step

    class GroupsFail(PoolFull):
        def group(self, spec, span, *rest):
            raise jax.errors.JaxRuntimeError(POOL_OOM)

    pinned.step = GroupsFail(step, at=1, at_dispatch=True)
    try:
        with pytest.raises(HostMemoryError, match=r"^XLA's pinned host memory pool \("):
            list(pinned.capture_layers(TEXTS[:1], group_bytes=1))  # groups of one layer
    finally:
        pinned.step = step


def test_a_server_answers_a_full_pool_with_its_own_limit():
    assert engine_failure(HostMemoryError("pool")).limit == "host_memory"
    assert engine_failure(DeviceMemoryError("device")).limit == "device_memory"
    assert not hasattr(engine_failure(RuntimeError("bug")), "limit")


def test_captures_of_generated_continuations_are_held_the_same_way(tmp_path):
    from gpt2_fixture import make_gpt2_checkpoint

    engine = jaxattn.load(make_gpt2_checkpoint(tmp_path), buckets=(32,))
    want = engine.capture(["the cat sat", "hello"], generate=3, stop_at_eos=False)
    engine.pipeline.pinned_budget = 0
    got = engine.capture(["the cat sat", "hello"], generate=3, stop_at_eos=False)
    for cap, ref in zip(got, want, strict=True):
        assert cap.tokens == ref.tokens and cap.attention.tobytes() == ref.attention.tobytes()
        assert cap.attention.flags.owndata and not ref.attention.flags.owndata
    engine.pipeline.available_bytes = lambda: 1
    with pytest.raises(HostMemoryError, match="more than the host's available memory"):
        engine.capture(["the cat sat"], generate=3)


def test_a_grouped_query_models_keys_and_values_count_its_key_value_heads(tmp_path):
    """Keys and values have G (key/value heads) on their head axis, not H: the bytes
    the refusal (and the batch sizes, the server's limits) count are the arrays'."""
    from llama_fixture import make_llama_checkpoint

    engine = jaxattn.load(make_llama_checkpoint(tmp_path), buckets=(16,))
    config = engine.config
    assert (config.num_heads, config.kv_heads) == (4, 2)  # grouped-query attention
    texts = ["the cat sat", "hello there"]
    caps = engine.capture(texts, what=("keys", "values"))
    lengths = [len(c.tokens) for c in caps]
    # 3 layers x 2 key/value heads x T x head_dim 10 float32, keys and values
    want = sum(2 * 3 * 2 * t * 10 * 4 for t in lengths)
    assert sum(c.keys.nbytes + c.values.nbytes for c in caps) == want
    spec = engine.make_spec(("keys", "values"))
    assert engine.output_bytes(spec, 16) == 2 * 3 * 2 * 16 * 10 * 4
    engine.pipeline.available_bytes = lambda: 1
    with pytest.raises(HostMemoryError, match=f"come to .* \\({want} bytes\\)"):
        engine.capture(texts, what=("keys", "values"))


def test_a_lone_example_past_the_batch_budget_that_fills_the_pool_runs_in_groups(pinned):
    """Under the example budget (`Budgets.example_bytes`, larger than the batch's) an
    example's outputs land whole in the pinned pool; where the pool runs out, it runs in
    layer groups, as it would have under the batch budget, and its Capture is the same."""
    want = pinned.capture(TEXTS[:2])
    budgets = pinned.pipeline.budgets
    pinned.pipeline.budgets = dataclasses.replace(
        budgets, max_batch=1, output_bytes=1, example_bytes=1 << 40
    )
    step = pinned.step

    class GroupsRun(PoolFull):
        def group(self, *args, **kwargs):
            return step.group(*args, **kwargs)

    pinned.step = full = GroupsRun(step, at=1, at_dispatch=True)
    try:
        got = pinned.capture(TEXTS[:2])
    finally:
        pinned.step, pinned.pipeline.budgets = step, budgets
    assert full.sizes == [1, 1]  # each example failed once as one program, then ran in groups
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.attention, w.attention)
