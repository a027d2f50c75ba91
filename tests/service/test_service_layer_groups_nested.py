"""The batcher's worker between an example's layer groups, reviewed adversarially (on a
fake engine, no compiles): while a grouped example waits for its reader the worker
serves the others, including a second grouped example whose reader is slow too; either
suspended run resumes as soon as its own reader takes its group, so a client that reads
its calls one after another in either order never waits on itself, and small calls go on
while two slow readers hold their examples. close() stops a suspended run and fails its
call; an engine error, a cancel or a deadline between groups frees every byte; the
examples of one call come in input order, grouped and whole ones mixed.

Every wait is bounded: a deadlock fails the test (a reader thread still alive after
`join(LIMIT)`) instead of hanging it; nothing asserts on speed."""

from __future__ import annotations

import threading
import time
import types

import numpy as np
import pytest
from layer_group_support import (
    BUFFER,
    GROUP,
    GROUPS,
    LIMIT,
    LONG,
    SHORT,
    SMALL,
    Reader,
    finish,
    text,
    wait_until,
)

from service.admitted_call import EngineFailed, SlowReader
from service.micro_batching import JobCancelled, MicroBatcher


class MixedEngine:
    """`Engine.run(parts=True)`'s shape: the short examples whole first, then each long
    one in GROUPS parts, in input order (as `BatchPipeline.run`); `fail_at[name]` = the
    part of that example at which the engine raises; `estimate`: None, or the output
    bytes it says every example has (an engine off in its sizes)."""

    def __init__(self, group=GROUP, small=SMALL, estimate=None):
        self.group, self.small, self.estimate = group, small, estimate
        self.made: list[tuple[str, int | None]] = []  # (example, part or None: whole)
        self.fail_at: dict[str, int] = {}

    def output_bytes(self, spec, length):
        if self.estimate is not None:
            return self.estimate
        return GROUPS * self.group if length == LONG else self.small

    def part_bytes(self, spec, length, group_bytes=None):
        if self.estimate is not None:
            return self.estimate
        return self.group if length == LONG else self.small

    def run(self, tokenized, spec, parts=False, group_bytes=None, skip=None):
        assert parts and group_bytes == self.group
        for pos, e in enumerate(tokenized):
            if e.length != LONG:
                self.made.append((e.name, None))
                yield pos, capture(self.small, 0, True, e.name)
        for pos, e in enumerate(tokenized):
            if e.length == LONG:
                for k in range(GROUPS):
                    if skip is not None and skip(pos):
                        break
                    if self.fail_at.get(e.name) == k:
                        raise RuntimeError(f"boom in {e.name} part {k}")
                    self.made.append((e.name, k))
                    yield pos, capture(self.group, k, k == GROUPS - 1, e.name)


def capture(size, part, last, name):
    tensors = {"attention": np.full(size, part, np.uint8)}
    return types.SimpleNamespace(tensors=tensors, part=part, last=last, name=name)


@pytest.fixture
def make():
    made = []

    def build(group=GROUP, buffer=BUFFER, stall_s=60.0, small=SMALL, estimate=None, **kw):
        engine = MixedEngine(group, small, estimate)
        kw = dict(queue_size=8, window_s=0.0, max_batch_examples=4) | kw
        b = MicroBatcher(engine, buffer_bytes=buffer, stall_s=stall_s, group_bytes=group, **kw)
        b.start()
        made.append(b)
        return b

    yield build
    for b in made:
        b.close(timeout=5)
        assert not b._thread.is_alive(), "the worker did not stop at close()"


def held_with_first_group(batcher, name, spec=None, waits=1):
    """A call for one long example whose reader took its first group and stopped; returns
    once the worker holds its next group (the `waits`-th run suspended)."""
    job = batcher.submit(spec or name, [text(name)])
    results = job.results()
    index, part = next(results)
    assert (index, part.part, part.last) == (0, 0, False)
    wait_until(lambda: batcher.stats["group_waits"] >= waits)
    return job, results


def parts_of(got, name):
    return [part for call, _, part in got if call == name]


def test_a_client_reading_its_calls_one_after_another_never_waits_on_itself(make):
    """A long example held for its reader; a second call's long example starts meanwhile
    and is held for its reader too. The client reads the first call to its end, then the
    second: the first call's run must go on although the second's waits (the worker
    resumes whichever run its reader freed), not sit until the client is cut off."""
    b = make()
    a = b.submit("a", [text("a")])
    wait_until(lambda: b.stats["group_waits"] >= 1)  # a's first group unread: held
    c = b.submit("c", [text("c")])
    wait_until(lambda: c.buffered >= GROUP)  # c's first group in: c is held too
    reader = Reader(("a", a.results()), ("c", c.results()))
    assert reader.finished(), "deadlock: the worker waits for c's reader, who waits for a"
    assert reader.errors == {}
    assert parts_of(reader.got, "a") == [0, 1, 2] and parts_of(reader.got, "c") == [0, 1, 2]
    assert b.stats["stalled"] == 0 and b.stats["served_while_waiting"] >= 1
    finish(b, a, c)


def test_the_same_client_reading_the_later_call_first_is_served_too(make):
    b = make()
    a = b.submit("a", [text("a")])
    wait_until(lambda: b.stats["group_waits"] >= 1)
    c = b.submit("c", [text("c")])
    reader = Reader(("c", c.results()), ("a", a.results()))
    assert reader.finished(), "deadlock: c never ran while a waited for its reader"
    assert reader.errors == {}
    assert parts_of(reader.got, "c") == [0, 1, 2] and parts_of(reader.got, "a") == [0, 1, 2]
    finish(b, a, c)


def test_two_slow_readers_of_long_examples_do_not_hold_up_small_calls(make):
    b = make()
    slow1, results1 = held_with_first_group(b, "slow1")
    slow2, results2 = held_with_first_group(b, "slow2", waits=2)  # held while slow1 is
    small = [b.submit("small", [text(f"s{i}", SHORT), text(f"t{i}", SHORT)]) for i in range(3)]
    readers = [Reader((f"s{i}", job.results())) for i, job in enumerate(small)]
    assert all(r.finished() for r in readers), "small calls wait on another call's slow reader"
    assert all(r.errors == {} and [i for _, i, _ in r.got] == [0, 1] for r in readers)
    assert b.stats["stalled"] == 0
    assert [p.part for _, p in results1] == [1, 2]  # the slow ones, once they read on
    assert [p.part for _, p in results2] == [1, 2]
    assert b.stats["peak_job_buffered_bytes"] <= BUFFER
    finish(b, slow1, slow2, *small)


def test_close_while_a_run_waits_for_its_reader_stops_it_and_fails_the_call(make):
    """close() (the server stopping) while an example of a two-example call waits between
    its groups: its remaining groups are not computed and not buffered past the call's
    limit, and the call ends (JobCancelled: UNAVAILABLE) instead of waiting forever for
    an example no worker will run."""
    b = make()
    job = b.submit("a", [text("a"), text("a2")])
    results = job.results()
    assert next(results)[1].part == 0
    wait_until(lambda: b.stats["group_waits"] >= 1)
    b.close(timeout=5)
    assert not b._thread.is_alive()
    reader = Reader(("a", results))
    assert reader.finished(), "the call waits forever for an example after close()"
    assert isinstance(reader.errors.get("a"), JobCancelled)
    assert ("a", 1) not in b.engine.made and ("a2", 0) not in b.engine.made
    assert job.buffered == 0 and b.stats["peak_job_buffered_bytes"] <= BUFFER
    finish(b, job)


def test_close_while_two_runs_wait_ends_both_calls(make):
    b = make()
    a, results_a = held_with_first_group(b, "a")
    c, results_c = held_with_first_group(b, "c", waits=2)
    b.close(timeout=5)
    assert not b._thread.is_alive()
    reader = Reader(("a", results_a), ("c", results_c))
    assert reader.finished()
    assert set(reader.errors) == {"a", "c"}
    assert all(isinstance(e, JobCancelled) for e in reader.errors.values())
    assert not {("a", 1), ("c", 1)} & set(b.engine.made)
    finish(b, a, c)


def test_drain_while_a_run_waits_returns_once_its_reader_has_read(make):
    b = make()
    a, results = held_with_first_group(b, "a")
    drained = []
    drainer = threading.Thread(target=lambda: drained.append(b.drain(LIMIT)), daemon=True)
    drainer.start()
    assert [p.part for _, p in results] == [1, 2]
    b.release(a)  # the servicer, once the call ended
    drainer.join(LIMIT)
    assert drained == [True]
    finish(b, a)


@pytest.mark.parametrize("where", ["alone", "while another waits"])
def test_an_engine_error_between_groups_frees_every_byte(make, where):
    b = make()
    b.engine.fail_at["boom"] = 1
    others = []
    if where != "alone":
        others = [held_with_first_group(b, "a")]
    boom = b.submit("boom", [text("boom")])
    reader = Reader(("boom", boom.results()))
    assert reader.finished()
    assert reader.got == [("boom", 0, 0)] and isinstance(reader.errors["boom"], EngineFailed)
    assert boom.buffered == 0
    for _, results in others:  # the run that waited is not hurt
        assert [p.part for _, p in results] == [1, 2]
    finish(b, boom, *(job for job, _ in others))


def test_a_slow_reader_cut_off_while_another_run_waits_frees_every_byte(make):
    b = make(stall_s=0.3)
    a, results_a = held_with_first_group(b, "a")
    c, results_c = held_with_first_group(b, "c", waits=2)
    wait_until(lambda: b.stats["stalled"] == 2)  # neither read on: both cut off
    assert b.admitted == 0 and b.reserved_bytes == 0 and b.buffered_bytes == 0
    for results in (results_a, results_c):
        with pytest.raises(SlowReader):
            next(results)
    assert not {("a", 1), ("c", 1)} & set(b.engine.made)
    finish(b, a, c)


@pytest.mark.parametrize("how", ["cancelled", "deadline"])
def test_a_call_gone_while_another_run_goes_on_stops_its_example(make, how):
    """The first call ends (its client cancels, or its deadline passes) while the worker
    is busy with a second grouped example: the first example computes no more groups,
    the second finishes, and every byte comes back."""
    b = make()
    deadline = time.monotonic() + 0.5 if how == "deadline" else None
    a = b.submit("a", [text("a")], deadline)
    results_a = a.results()
    assert next(results_a)[1].part == 0
    wait_until(lambda: b.stats["group_waits"] >= 1)
    c, results_c = held_with_first_group(b, "c", waits=2)
    if how == "cancelled":
        b.release(a)
    else:
        wait_until(a.past_deadline)
    assert [p.part for _, p in results_c] == [1, 2]
    wait_until(lambda: b.stats["abandoned"] == 1)
    assert ("a", 1) not in b.engine.made
    a.cancel()  # what gRPC fires either way (the servicer's callback)
    with pytest.raises(JobCancelled):
        next(results_a)
    finish(b, a, c)


def test_a_calls_examples_come_in_input_order_grouped_and_whole_mixed(make):
    """Groups of 200 bytes: a long example (600 bytes) fits a piece beside short ones,
    so pieces mix them; the engine hands the short ones over first, yet the reader gets
    every example in input order, a long one's groups in order."""
    b = make(group=200, buffer=1500)
    names = ["L0", "S1", "L2", "S3", "S4", "L5", "L6", "S7"]
    texts = [text(n, LONG if n[0] == "L" else SHORT) for n in names]
    job = b.submit("x", texts)
    other = b.submit("x", [text("L9"), text("S10", SHORT)])  # shares the engine calls
    reader = Reader(("x", job.results()), ("o", other.results()))
    assert reader.finished() and reader.errors == {}
    want = []
    for i, n in enumerate(names):
        want += [("x", i, k) for k in range(GROUPS)] if n[0] == "L" else [("x", i, 0)]
    want += [("o", 0, 0), ("o", 0, 1), ("o", 0, 2), ("o", 1, 0)]
    assert reader.got == want
    finish(b, job, other)


def test_a_held_group_goes_on_when_its_reader_waits_for_it_behind_a_later_example(make):
    """Sizes under-estimated: a long example and a short one (after it in input order)
    share a piece; the short one lands first, and beside it the long one's next group
    does not fit the buffer, yet the reader can take nothing more until that group
    comes. The worker goes on (its reader waits for it: `Job.starved`) rather than both
    waiting for ever (a waiting reader is never cut off as stalled)."""
    b = make(small=700, estimate=10)
    job = b.submit("x", [text("L0"), text("S1", SHORT)])
    reader = Reader(("x", job.results()))
    assert reader.finished(), "deadlock: the worker holds a group its reader waits for"
    assert reader.errors == {}
    assert reader.got == [("x", 0, 0), ("x", 0, 1), ("x", 0, 2), ("x", 1, 0)]
    assert b.stats["batches"] == 1  # one piece: the case above
    finish(b, job)


def test_at_most_two_runs_wait_between_groups_a_third_long_example_waits_its_turn(make):
    """Each suspended run keeps its hidden state and groups on the device: with two
    suspended, a third long example does not start (short ones do) until one is done."""
    b = make()
    a, results_a = held_with_first_group(b, "a")
    c, results_c = held_with_first_group(b, "c", waits=2)
    third = b.submit("d", [text("d")])
    small = b.submit("s", [text("s", SHORT)])
    assert [i for i, _ in small.results()] == [0]  # a short one starts meanwhile
    assert ("d", 0) not in b.engine.made and b.pending == 1
    assert [p.part for _, p in results_a] == [1, 2]  # a is done: d may start
    reader = Reader(("d", third.results()))
    assert reader.finished() and parts_of(reader.got, "d") == [0, 1, 2]
    assert [p.part for _, p in results_c] == [1, 2]
    finish(b, a, c, third, small)
