"""An example served in layer groups under the bad cases, in the batcher (issue 31,
review), on a fake engine that hands each example over in parts (no compiles): an
example's next group waits until its client has taken the last one, the worker serving
the other calls meanwhile; a client that then reads nothing for stall_s is cut off as
a slow reader, one that cancels or whose deadline passes stops the example's compute;
every job's reservation comes back, and the buffered-bytes counters never pass one
group beside the buffer."""

from __future__ import annotations

import threading
import time
import types

import numpy as np
import pytest

from service.admitted_call import SlowReader
from service.micro_batching import JobCancelled, MicroBatcher

GROUP = 1000  # bytes of one layer group of an example
GROUPS = 3
BUFFER = 1500  # a call's unsent results: one group, not two


class PartsEngine:
    """Each example in GROUPS parts of GROUP bytes (`Engine.run(parts=True)`'s shape)."""

    def __init__(self):
        self.made: list[tuple[str, int]] = []  # (example, part) handed over
        self.closed: list[str] = []  # the first example of each run closed

    def output_bytes(self, spec, length):
        return GROUPS * GROUP

    def part_bytes(self, spec, length, group_bytes=None):
        return GROUP

    def run(self, tokenized, spec, parts=False, group_bytes=None, skip=None):
        assert parts and group_bytes == GROUP
        try:
            for pos, e in enumerate(tokenized):
                for k in range(GROUPS):
                    if skip is not None and skip(pos):
                        break  # as `BatchPipeline.run_groups`
                    self.made.append((e.name, k))
                    tensors = {"attention": np.full(GROUP, k, np.uint8)}
                    yield pos, types.SimpleNamespace(tensors=tensors, part=k, last=k == GROUPS - 1)
        finally:
            self.closed.append(tokenized[0].name)


def text(name):
    return types.SimpleNamespace(name=name, length=7)


@pytest.fixture
def batcher():
    engine = PartsEngine()
    b = MicroBatcher(
        engine,
        queue_size=4,
        window_s=0.0,
        max_batch_examples=4,
        buffer_bytes=BUFFER,
        stall_s=0.5,
        group_bytes=GROUP,
    )
    b.start()
    yield b
    b.close(timeout=5)


def served(batcher, name):
    """The parts of a fresh job for one example, read at once in a thread."""
    job = batcher.submit(name, [text(name)])
    got: list = []
    reader = threading.Thread(target=lambda: got.extend(c.part for _, c in job.results()))
    reader.start()
    return job, reader, got


def first_part_then_stop(batcher, name, deadline=None):
    job = batcher.submit(name, [text(name)], deadline)
    results = job.results()
    index, part = next(results)
    assert (index, part.part, part.last) == (0, 0, False)
    return job, results


def wait_until(condition, timeout=10.0):
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def finish(batcher, *jobs):
    for job in jobs:
        batcher.release(job)
    assert batcher.admitted == 0 and batcher._reserved == 0


def test_a_reader_that_takes_each_group_gets_them_all_one_group_buffered(batcher):
    job, reader, got = served(batcher, "a")
    reader.join(10)
    assert got == [0, 1, 2]
    assert batcher.stats["peak_job_buffered_bytes"] <= BUFFER
    finish(batcher, job)


def test_a_reader_stalled_between_groups_is_cut_off_and_others_are_served(batcher):
    slow, results = first_part_then_stop(batcher, "slow")
    other, reader, got = served(batcher, "other")  # another spec: the next engine call
    reader.join(10)
    assert got == [0, 1, 2]  # served while the slow one waited, before it was cut off
    wait_until(lambda: batcher.stats["stalled"] == 1)
    with pytest.raises(SlowReader, match="read nothing for 0.5 s"):
        next(results)
    assert batcher.stats["stalled"] == 1 and batcher.stats["group_waits"] >= 1
    assert ("slow", 1) not in batcher.engine.made  # its next group never computed
    assert "slow" in batcher.engine.closed
    finish(batcher, slow, other)


def test_a_slow_reader_between_groups_delays_only_itself(batcher):
    """While a grouped example waits for its reader (slow, not stalled), the worker
    serves the other calls, then goes on with the example where it stopped."""
    batcher.stall_s = 60.0  # slow, never cut off here
    slow, results = first_part_then_stop(batcher, "slow")
    wait_until(lambda: batcher.stats["group_waits"] >= 1)  # the worker waits for it
    other, reader, got = served(batcher, "other")
    reader.join(10)
    assert got == [0, 1, 2]  # served while "slow" held its first group unread
    assert batcher.stats["served_while_waiting"] >= 1 and batcher.stats["stalled"] == 0
    assert [part.part for _, part in results] == [1, 2]  # the rest, once read
    assert batcher.engine.made.count(("slow", 1)) == 1
    finish(batcher, slow, other)


def test_a_client_that_cancels_between_groups_stops_the_examples_compute(batcher):
    gone, results = first_part_then_stop(batcher, "gone")
    wait_until(lambda: batcher.stats["group_waits"] >= 1)  # the worker waits for it
    batcher.release(gone)  # what the servicer does when the call is cancelled
    with pytest.raises(JobCancelled):
        next(results)
    other, reader, got = served(batcher, "other")
    reader.join(10)
    assert got == [0, 1, 2]
    assert ("gone", 1) not in batcher.engine.made and batcher.stats["abandoned"] == 1
    assert batcher.stats["stalled"] == 0
    finish(batcher, gone, other)


def test_a_deadline_passed_between_groups_stops_the_examples_compute(batcher):
    batcher.stall_s = 30.0  # not a slow reader: its deadline ends it
    late, results = first_part_then_stop(batcher, "late", time.monotonic() + 0.3)
    other, reader, got = served(batcher, "other")
    reader.join(10)
    assert got == [0, 1, 2]  # served while the late one waited
    wait_until(lambda: batcher.stats["abandoned"] == 1)  # its deadline passed: stopped
    assert ("late", 1) not in batcher.engine.made
    assert batcher.stats["stalled"] == 0
    late.cancel()  # what gRPC's deadline fires (the servicer's callback)
    with pytest.raises(JobCancelled):
        next(results)
    finish(batcher, late, other)


def test_grouped_pieces_never_share_an_engine_call_and_a_gone_one_stops(batcher):
    """Two calls' grouped examples, within one batching window: each runs in an engine
    call of its own (a run suspended for one reader must not hold the other's example:
    the client reading its calls in turn waited on itself when they shared one), and
    the one whose call ends between groups stops there."""
    batcher.window_s = 0.5  # would merge both pieces into one engine call
    gone = batcher.submit("s", [text("gone")])
    stays = batcher.submit("s", [text("stays")])
    kept: list = []
    reader = threading.Thread(target=lambda: kept.extend(c.part for _, c in stays.results()))
    reader.start()
    results = gone.results()
    assert next(results)[1].part == 0
    wait_until(lambda: batcher.stats["group_waits"] >= 1)  # gone's run waits for it
    batcher.release(gone)  # cancelled
    reader.join(10)
    assert not reader.is_alive() and kept == [0, 1, 2]
    assert batcher.stats["batches"] == 2  # one engine call each
    assert ("gone", 1) not in batcher.engine.made  # its other groups never computed
    finish(batcher, gone, stays)
