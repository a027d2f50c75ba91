"""Review 27a (2026-11-28): demonstrations of the findings on the cpuquota and gencache
merges. Each test states the behaviour the fix should give; on main (05fe52e) the ones
marked FAILS fail."""

from __future__ import annotations

import threading
import time

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import SingleDeviceSharding

import jaxattn
from jaxattn import cpus
from jaxattn.engine import program_cache


def test_a_capture_call_does_not_read_the_cgroup_files(bert_checkpoint, monkeypatch):
    """FAILS: `BatchPipeline._compile_ahead` calls `compile_threads` (so `cpus.usable`,
    which opens /proc/self/cgroup and every cgroup level's cpu.max / cfs files) on every
    call, before it knows whether there are two new shapes to compile."""
    engine = jaxattn.load(bert_checkpoint, buckets=(16,))
    engine.capture(["a b c"], what=("attention",))  # compiled
    reads = []
    real = cpus.cgroup_cpus
    monkeypatch.setattr(cpus, "cgroup_cpus", lambda *a: reads.append(a) or real(*a))
    for _ in range(3):
        engine.capture(["a b c"], what=("attention",))
    assert reads == []


def test_concurrent_first_calls_make_one_program(tmp_path):
    """FAILS: with the program cache on, `Program.compiled` has no per-key guard: four
    threads' first calls of one shape each load or export, compile and save it (a
    jax.jit, as the generation programs were, compiles it once)."""
    s = SingleDeviceSharding(jax.devices()[0])

    def f(x):
        time.sleep(0.2)  # a model's trace takes a while
        return jnp.cos(x) * 3

    cache = program_cache.ProgramCache(tmp_path, "review27a", jax.devices()[:1])
    program = program_cache.Program("r27a", f, cache, in_shardings=(s,), out_shardings=s)
    x = jax.device_put(jnp.ones((11,)), s)
    start = threading.Barrier(4)

    def first_call():
        start.wait()
        program(x)

    threads = [threading.Thread(target=first_call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.saved == 1


@pytest.mark.parametrize("mount", ["cpuacct,cpu", "cpu,cpuacct,cpuset"])
def test_a_v1_quota_under_the_hierarchy_the_cgroup_line_names(tmp_path, monkeypatch, mount):
    """FAILS: v1's cpu hierarchy is looked for only as `cpu` and `cpu,cpuacct`; one mounted
    under another name (the controllers the /proc/self/cgroup line lists, no `cpu`
    link) is passed over and the pools are sized by the node's cores."""
    monkeypatch.setattr(cpus, "affinity", lambda: 64)
    proc = tmp_path / "cgroup"
    proc.write_text(f"4:{mount}:/docker/x\n")
    level = tmp_path / "root" / mount
    level.mkdir(parents=True)
    (level / "cpu.cfs_quota_us").write_text("200000\n")
    (level / "cpu.cfs_period_us").write_text("100000\n")
    assert cpus.usable(str(proc), str(tmp_path / "root")) == 2


def test_one_odd_line_of_proc_cgroup_does_not_hide_the_others(tmp_path, monkeypatch):
    """FAILS (theoretical: the kernel writes every line as id:controllers:path): a line
    without two colons makes `cgroup_path` give up on the whole file."""
    monkeypatch.setattr(cpus, "affinity", lambda: 64)
    proc = tmp_path / "cgroup"
    proc.write_text("odd\n0::/a\n")
    (tmp_path / "root" / "a").mkdir(parents=True)
    (tmp_path / "root" / "a" / "cpu.max").write_text("200000 100000\n")
    assert cpus.usable(str(proc), str(tmp_path / "root")) == 2
