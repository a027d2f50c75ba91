"""The micro-batcher's logic, on a fake engine (no compiles): merging, order, drops, failures."""

from __future__ import annotations

import threading
import time

import pytest

from service.micro_batching import EngineFailed, JobCancelled, MicroBatcher, QueueFull


class FakeEngine:
    """`run` yields (position, (spec, encoding)) in reverse order, like a bucketed engine."""

    def __init__(self, fail_on=None, delay=0.0, reverse=True):
        self.reverse = reverse
        self.calls: list[tuple[object, list]] = []
        self.fail_on = fail_on
        self.delay = delay
        self.closed = threading.Event()

    def run(self, tokenized, spec):
        self.calls.append((spec, list(tokenized)))
        try:
            order = range(len(tokenized))
            for pos in reversed(order) if self.reverse else order:
                if tokenized[pos] == self.fail_on:
                    raise RuntimeError("boom")
                time.sleep(self.delay)
                yield pos, (spec, tokenized[pos])
        finally:
            self.closed.set()


def make(engine, **kw):
    kw = dict(queue_size=8, window_s=0.05, max_batch_examples=6) | kw
    batcher = MicroBatcher(engine, **kw)
    batcher.start()
    return batcher


def collect(job):
    return [(i, cap[1]) for i, cap in job.results()]


def test_same_spec_jobs_share_one_call_and_results_come_back_in_order():
    engine = FakeEngine()
    b = make(engine)
    jobs = [b.submit("A", ["a0", "a1"]), b.submit("B", ["b0"]), b.submit("A", ["a2", "a3"])]
    results = [collect(j) for j in jobs]
    assert results == [[(0, "a0"), (1, "a1")], [(0, "b0")], [(0, "a2"), (1, "a3")]]
    assert engine.calls == [("A", ["a0", "a1", "a2", "a3"]), ("B", ["b0"])]
    for j in jobs:
        b.release(j)
    assert b.admitted == 0
    b.close()


def test_merging_stops_at_max_batch_examples_and_can_be_switched_off():
    engine = FakeEngine()
    b = make(engine, max_batch_examples=3)
    jobs = [b.submit("A", [f"x{i}", f"y{i}"]) for i in range(3)]
    for j in jobs:
        collect(j)
    assert [len(e) for _, e in engine.calls] == [2, 2, 2]  # 2 + 2 > 3
    b.close()
    engine = FakeEngine()
    b = make(engine, merge=False)
    jobs = [b.submit("A", ["a"]) for _ in range(3)]
    for j in jobs:
        collect(j)
    assert [len(e) for _, e in engine.calls] == [1, 1, 1]
    b.close()


def test_queue_is_bounded_and_release_frees_a_slot():
    b = make(FakeEngine(), queue_size=2)
    j1, j2 = b.submit("A", ["a"]), b.submit("A", ["b"])
    with pytest.raises(QueueFull, match="queue is full"):
        b.submit("A", ["c"])
    b.release(j1)
    j3 = b.submit("A", ["c"])
    assert collect(j3) == [(0, "c")]
    b.release(j2), b.release(j3)
    b.close()


def test_dead_jobs_are_dropped_before_running():
    engine = FakeEngine()
    b = MicroBatcher(engine, queue_size=8, window_s=0.0, max_batch_examples=8)
    cancelled = b.submit("A", ["gone"])
    cancelled.cancel()
    b.submit("A", ["late"], deadline=time.monotonic() - 1)
    alive = b.submit("A", ["kept"])
    b.start()
    assert collect(alive) == [(0, "kept")]
    assert engine.calls == [("A", ["kept"])]
    with pytest.raises(JobCancelled):
        collect(cancelled)
    assert b.stats["dropped"] == 2
    b.close()


def test_a_batch_everyone_left_is_abandoned_mid_run():
    engine = FakeEngine(delay=0.05, reverse=False)
    b = make(engine, window_s=0.0)
    job = b.submit("A", [f"t{i}" for i in range(40)])
    results = job.results()
    next(results)
    job.cancel()
    assert engine.closed.wait(5)
    assert b.stats["abandoned"] == 1
    assert len(engine.calls) == 1 and engine.closed.is_set()
    b.close()


def test_engine_failure_fails_only_its_batch():
    engine = FakeEngine(fail_on="bad")
    b = make(engine)
    bad = [b.submit("A", ["ok1"]), b.submit("A", ["bad"])]
    other = b.submit("B", ["fine"])
    for j in bad:
        with pytest.raises(EngineFailed, match="boom"):
            collect(j)
    assert collect(other) == [(0, "fine")]
    b.close()


def test_close_cancels_queued_jobs_and_refuses_new_ones():
    b = MicroBatcher(FakeEngine(), queue_size=4, window_s=0.0, max_batch_examples=4)
    job = b.submit("A", ["never"])
    b.close()
    with pytest.raises(JobCancelled):
        collect(job)
    with pytest.raises(JobCancelled):
        b.submit("A", ["x"])
