"""The batcher's memory bounds on a fake engine: pieces, per-call buffers, reservations, stalls."""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import pytest
from rel_support import wait_for

from service.micro_batching import STREAM_CHUNKS, MicroBatcher, QueueFull, SlowReader

KB = 1000


@dataclasses.dataclass(frozen=True)
class Enc:
    length: int


class SizedEngine:
    """Each example's capture holds `length` kB; records every run call's examples."""

    def __init__(self):
        self.calls: list[list[int]] = []

    def output_bytes(self, spec, length):
        return length * KB

    def run(self, tokenized, spec):
        self.calls.append([e.length for e in tokenized])
        for pos, e in enumerate(tokenized):
            cap = type("Cap", (), {"tensors": {"x": np.zeros(e.length * KB, np.uint8)}})()
            yield pos, cap


def batcher(**kw):
    kw = dict(queue_size=8, window_s=0.0, max_batch_examples=8, buffer_bytes=10 * KB) | kw
    b = MicroBatcher(SizedEngine(), **kw)
    b.start()
    return b


def test_a_large_call_runs_in_pieces_that_fit_its_buffer_and_others_get_turns():
    b = batcher()
    big = b.submit("A", [Enc(3)] * 12)  # 36 kB in pieces of <= 5 kB: 1 example each
    small = b.submit("B", [Enc(1)])
    got = [i for i, _ in big.results()]
    assert got == list(range(12))
    assert [i for i, _ in small.results()] == [0]
    calls = b.engine.calls
    assert all(sum(c) <= 5 for c in calls) and sum(len(c) for c in calls) == 13
    assert calls.index([1]) < len(calls) - 1  # the small call did not wait for all of big
    assert b.stats["peak_job_buffered_bytes"] <= 10 * KB
    b.close()


def test_a_call_that_reads_nothing_holds_at_most_its_buffer():
    b = batcher(stall_s=60)
    job = b.submit("A", [Enc(4)] * 20)
    results = job.results()
    next(results)  # takes example 0, then reads nothing more
    time.sleep(0.3)
    # Pieces of at most half the buffer (5 kB): two fit (8 kB), a third would not.
    assert b.engine.calls == [[4], [4]]
    assert job.buffered <= 10 * KB
    for _ in results:  # reading again lets the rest run
        pass
    assert sum(len(c) for c in b.engine.calls) == 20
    b.close()


def test_one_example_larger_than_the_buffer_still_runs_alone():
    b = batcher()
    job = b.submit("A", [Enc(25), Enc(1)])
    assert [i for i, _ in job.results()] == [0, 1]
    assert b.engine.calls == [[25], [1]]
    b.close()


def test_admission_reserves_each_calls_worst_case_bytes():
    b = batcher(total_bytes=25 * KB)
    first = b.submit("A", [Enc(4)] * 20, chunk_bytes=1 * KB)  # min(80, max(10, 4)) + 4 x 1
    assert first.reserved == 10 * KB + STREAM_CHUNKS * KB
    second = b.submit("A", [Enc(2)] * 3)  # 6 kB in all
    assert b.reserved_bytes == 20 * KB
    with pytest.raises(QueueFull, match="result buffers are full"):
        b.submit("A", [Enc(4)] * 3)
    with pytest.raises(QueueFull, match="needs"):
        b.submit("A", [Enc(30)])  # one example over the whole budget: never admissible
    b.release(first)
    b.release(first)  # idempotent
    assert b.reserved_bytes == 6 * KB and b.admitted == 1
    b.release(second)
    assert b.reserved_bytes == 0
    b.close()


def test_a_stalled_reader_is_failed_cancelled_and_its_slot_freed():
    b = batcher(stall_s=0.3)
    job = b.submit("A", [Enc(4)] * 20)
    cancelled = threading.Event()
    job.on_stall = cancelled.set
    results = job.results()
    next(results)
    wait_for(cancelled.is_set, 5, "the call cancelled")
    assert b.stats["stalled"] == 1 and b.admitted == 0 and b.reserved_bytes == 0
    assert job.buffered == 4 * KB  # only the example the handler still holds
    with pytest.raises(SlowReader, match="read nothing"):
        next(results)
    assert job.buffered == 0
    b.close()


def test_a_reader_waiting_for_the_engine_is_never_called_slow():
    b = batcher(stall_s=0.2)
    slow = b.submit("A", [Enc(1)])
    engine_run = b.engine.run

    def sluggish(tokenized, spec):  # the engine, not the client, is slow
        for item in engine_run(tokenized, spec):
            time.sleep(0.5)
            yield item

    b.engine.run = sluggish
    assert [i for i, _ in slow.results()] == [0]
    job = b.submit("A", [Enc(1)] * 3)
    assert [i for i, _ in job.results()] == [0, 1, 2]
    assert b.stats["stalled"] == 0
    b.close()


def test_a_reader_is_timed_from_when_its_example_arrived():
    """The engine took longer than stall_s; the client then holds its example for less
    than stall_s: the time it waited for the engine is not time it read nothing."""
    b = batcher(stall_s=0.4)
    engine_run = b.engine.run

    def sluggish(tokenized, spec):
        time.sleep(0.8)
        yield from engine_run(tokenized, spec)

    b.engine.run = sluggish
    job = b.submit("A", [Enc(1)])
    results = job.results()
    assert next(results)[0] == 0
    time.sleep(0.2)  # the worker reaps meanwhile: its clock started when the example came
    assert list(results) == [] and b.stats["stalled"] == 0
    b.close()


def test_a_computed_job_sends_without_waking_the_worker():
    """Once every example is in, taking one frees nothing the worker waits for: the
    handler does not wake it at each example (it costs the sender the interpreter lock).
    A job held back by its buffer still runs to its end: the worker is told as its reader
    waits for and takes examples."""
    b = batcher(stall_s=60)
    job = b.submit("A", [Enc(1)] * 5)  # 5 kB: all computed at once, in the buffer
    wait_for(lambda: job.buffered == 5 * KB, 5, "every example in")
    told = []
    wake = job.notify_worker
    job.notify_worker = lambda: (told.append(1), wake())
    assert [i for i, _ in job.results()] == list(range(5))
    assert told == [] and job.buffered == 0
    held = b.submit("A", [Enc(4)] * 5)  # 20 kB through a 10 kB buffer: held back
    wake = held.notify_worker
    held.notify_worker = lambda: (told.append(1), wake())
    assert [i for i, _ in held.results()] == list(range(5))
    assert told
    b.close()


def test_a_computed_jobs_reader_that_stops_is_still_called_slow():
    """The reader waits for each example (its clock stopped), so the worker may fall
    asleep with no stall to time once the last is in; the reader takes it and then reads
    nothing: the worker is told that its clock runs, and fails it."""
    b = batcher(stall_s=0.3)
    engine_run = b.engine.run

    def sluggish(tokenized, spec):  # the reader waits for each example
        for item in engine_run(tokenized, spec):
            time.sleep(0.05)
            yield item

    b.engine.run = sluggish
    job = b.submit("A", [Enc(1)] * 3)
    cancelled = threading.Event()
    job.on_stall = cancelled.set
    results = job.results()
    assert [next(results)[0] for _ in range(3)] == [0, 1, 2]  # the last one held
    wait_for(cancelled.is_set, 5, "the call cancelled")
    assert b.stats["stalled"] == 1 and job.buffered == 1 * KB
    b.close()
