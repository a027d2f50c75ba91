"""One client, three or more calls whose examples run in layer groups, read in any order (on a
fake engine, no compiles): two runs suspended for readers that read something else hold both
slots (`SUSPENDED_RUNS`), so the call read first could not start and its reader waited until
the slow-reader cut-off. Now the idle run is preempted (its engine iterator closed) and
restarts from its first layer later, recomputing the groups it already put without sending
them again. Checked: every call completes, each group reaches its reader once and in order,
the arrays are the engine's whole-example output, at most `SUSPENDED_RUNS` examples are ever
held mid-way on the (fake) device, a restart over examples a run finished computes only
those it had not, a restart that computes other groups fails its call (not wrong numbers),
three readers each reading slowly preempt each other only a bounded number of times, and
close() while a preempted run waits ends every call.

Every wait is bounded: a deadlock fails the test (a reader thread still alive after
`join(LIMIT)`) instead of hanging it; nothing asserts on speed."""

from __future__ import annotations

import threading
import types
import zlib

import numpy as np
import pytest
from layer_group_support import (
    BUFFER,
    GROUP,
    GROUPS,
    LONG,
    SHORT,
    SMALL,
    Reader,
    finish,
    text,
    wait_until,
)

from service.admitted_call import EngineFailed
from service.grouped_runs import SUSPENDED_RUNS
from service.micro_batching import JobCancelled, MicroBatcher

IDLE = 0.05  # preempt_idle_s of these tests (the default's 1 s in one of them)


class Engine:
    """`Engine.run`'s shape: short examples whole first, then each long one in GROUPS parts
    (with `parts`; else whole), in input order. An example's bytes are its own (seeded by
    its name), so a group recomputed after a restart is the same and a mix-up shows.
    Instrumented: `mid` = long examples with a part handed over and the last not yet, in
    open runs (each holds its hidden state on a device), `peak_mid` its maximum; `made`
    every (example, part) computed; names in `diverge` compute other groups when run again.
    `group_sizes`: the engine decides which examples run in groups (as `jaxattn.Engine`);
    `estimate`: None, or the output bytes it says every example has."""

    def __init__(self, estimate=None):
        self.estimate = estimate
        self.made: list[tuple[str, int | None]] = []
        self.diverge: set[str] = set()
        self.mid = self.peak_mid = 0
        self.lock = threading.Lock()

    def output_bytes(self, spec, length):
        if self.estimate is not None:
            return self.estimate
        return GROUPS * GROUP if length == LONG else SMALL

    def part_bytes(self, spec, length, group_bytes=None):
        return GROUP if length == LONG else SMALL

    def group_sizes(self, tokenized, spec, group_bytes=None):
        return [1 if e.length == LONG else 0 for e in tokenized]

    def whole(self, name, length=LONG) -> np.ndarray:
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        return rng.integers(0, 256, GROUPS * GROUP if length == LONG else SMALL, np.uint8)

    def run(self, tokenized, spec, parts=False, group_bytes=None, skip=None):
        for pos, e in enumerate(tokenized):
            if e.length != LONG or not parts:
                self.made.append((e.name, None))
                yield pos, item(self.whole(e.name, e.length), 0, (0, GROUPS), e.name)
        for pos, e in enumerate(tokenized):
            if e.length == LONG and parts:
                yield from self._groups(pos, e.name, skip)

    def _groups(self, pos, name, skip):
        whole, cuts = self.whole(name), tuple(range(GROUPS + 1))
        if (name, 0) in self.made and name in self.diverge:
            cuts = (0, 2, 3)  # another grouping than the first run's
        started = False
        try:
            for k in range(GROUPS):
                if skip is not None and skip(pos):
                    return
                if not started:
                    started = True
                    with self.lock:
                        self.mid += 1
                        self.peak_mid = max(self.peak_mid, self.mid)
                self.made.append((name, k))
                yield pos, item(whole[k * GROUP : (k + 1) * GROUP], k, cuts, name)
        finally:
            if started:
                with self.lock:
                    self.mid -= 1


def item(data, part, cuts, name):
    last = part == len(cuts) - 2
    return types.SimpleNamespace(tensors={"attention": data}, part=part, cuts=cuts, last=last)


@pytest.fixture
def make():
    made = []

    def build(preempt_idle_s=IDLE, estimate=None, **kw):
        kw = dict(queue_size=8, window_s=0.0, max_batch_examples=4, stall_s=60.0) | kw
        b = MicroBatcher(
            Engine(estimate),
            buffer_bytes=BUFFER,
            group_bytes=GROUP,
            preempt_idle_s=preempt_idle_s,
            **kw,
        )
        b.start()
        made.append(b)
        return b

    yield build
    for b in made:
        b.close(timeout=5)
        assert not b._thread.is_alive(), "the worker did not stop at close()"
        assert b.engine.mid == 0, "a run's device state outlived close()"


def suspended(batcher, names):
    """Calls for one long example each, each started and held after its first group
    (nobody reads them yet) before the next is sent: they take every slot."""
    jobs = {}
    for n, name in enumerate(names, 1):
        jobs[name] = batcher.submit(name, [text(name)])
        wait_until(lambda n=n: batcher.stats["group_waits"] >= n)
    return jobs


def groups(name, index=0):
    return [(name, index, k) for k in range(GROUPS)]


@pytest.mark.parametrize("order", ["CBA", "CAB", "DCBA", "CDBA", "DACB"])
def test_one_reader_reading_calls_not_yet_started_first_gets_every_call_whole(make, order):
    """A and B start and wait for their reader (both slots); C (and D) cannot start. One
    thread reads them in `order`, beginning with a call not started: each completes, each
    group comes once and in order, and the bytes are the engine's whole-example output."""
    b = make()
    jobs = suspended(b, ["A", "B"])
    jobs |= {name: b.submit(name, [text(name)]) for name in sorted(set(order) - set(jobs))}
    reader = Reader(*[(name, jobs[name].results()) for name in order])
    assert reader.finished(), "deadlock: the call read first never started"
    assert reader.errors == {}
    assert reader.got == [g for name in order for g in groups(name)]  # none sent twice
    for name in order:
        want = b.engine.run([text(name)], name)  # the whole example, as one Capture
        np.testing.assert_array_equal(reader.example(name, 0), next(want)[1].tensors["attention"])
    assert b.stats["stalled"] == 0 and b.stats["preempted"] >= 1
    assert b.engine.peak_mid <= SUSPENDED_RUNS  # the device-memory bound kept
    recomputed = [name for name in order if b.engine.made.count((name, 0)) > 1]
    assert len(recomputed) == b.stats["preempted"]  # one recompute of group 0 each
    finish(b, *jobs.values())


def test_with_the_default_idle_time_the_call_read_first_starts_too(make):
    b = make(preempt_idle_s=1.0)
    jobs = suspended(b, ["A", "B"])
    jobs["C"] = b.submit("C", [text("C")])
    reader = Reader(*[(name, jobs[name].results()) for name in "CBA"])
    assert reader.finished()
    assert reader.errors == {} and reader.got == groups("C") + groups("B") + groups("A")
    assert b.stats["preempted"] == 1 and b.engine.made.count(("A", 0)) == 2
    finish(b, *jobs.values())


def test_a_restart_computes_again_only_what_its_run_had_not_finished(make):
    """X = [S0, L1, L2] in one piece (its sizes under-estimated): S0 is put whole, L1's
    first group beside it does not fit: X waits, then is preempted for Z's reader. When
    X's reader takes them, X restarts over L1 and L2 only: S0 is not computed again, L1's
    first group is computed again but not sent, the rest once."""
    b = make(estimate=10)
    x = b.submit("x", [text("S0", SHORT), text("L1"), text("L2")])
    wait_until(lambda: b.stats["group_waits"] >= 1)
    y = b.submit("y", [text("Y")])
    wait_until(lambda: b.stats["group_waits"] >= 2)
    z = b.submit("z", [text("Z")])
    reader = Reader(("z", z.results()), ("x", x.results()), ("y", y.results()))
    assert reader.finished() and reader.errors == {}
    assert reader.got == groups("z") + [("x", 0, 0), *groups("x", 1), *groups("x", 2)] + groups("y")
    made = b.engine.made
    assert made.count(("S0", None)) == 1 and made.count(("L1", 0)) == 2
    assert made.count(("L1", 1)) == made.count(("L2", 0)) == 1
    np.testing.assert_array_equal(reader.example("x", 1), b.engine.whole("L1"))
    np.testing.assert_array_equal(reader.example("x", 2), b.engine.whole("L2"))
    assert b.stats["preempted"] == 1 and b.stats["batches"] == 3  # x restarted, not re-run
    finish(b, x, y, z)


def test_a_restart_whose_groups_differ_fails_its_call_instead_of_sending_them(make):
    b = make()
    b.engine.diverge.add("A")
    jobs = suspended(b, ["A", "B"])
    jobs["C"] = b.submit("C", [text("C")])
    reader = Reader(*[(name, jobs[name].results()) for name in "CBA"])
    assert reader.finished()
    assert set(reader.errors) == {"A"} and isinstance(reader.errors["A"], EngineFailed)
    assert "restarted" in str(reader.errors["A"])
    assert reader.got == groups("C") + groups("B") + [("A", 0, 0)]
    finish(b, *jobs.values())


def test_three_slow_readers_preempt_each_other_a_bounded_number_of_times(make):
    """Three threads each read a call of two long examples, slowly, with two slots and no
    idle time required: runs are preempted back and forth, yet each preemption follows a
    group delivered (a run suspends only after putting one), so all finish."""
    b = make(preempt_idle_s=0.0)
    jobs = {name: b.submit(name, [text(name + "0"), text(name + "1")]) for name in "ABC"}
    readers = {name: Reader((name, job.results()), pause=0.02) for name, job in jobs.items()}
    assert all(r.finished() for r in readers.values()), "livelock or deadlock"
    for name, r in readers.items():
        assert r.errors == {} and r.got == groups(name, 0) + groups(name, 1)
        for i in range(2):
            np.testing.assert_array_equal(r.example(name, i), b.engine.whole(f"{name}{i}"))
    waits = 3 * 2 * (GROUPS - 1)  # a run suspends only after a group that is not the last
    assert b.stats["preempted"] <= b.stats["group_waits"] <= waits
    assert b.stats["stalled"] == 0 and b.engine.peak_mid <= SUSPENDED_RUNS
    finish(b, *jobs.values())


def test_close_while_a_preempted_run_waits_ends_every_call(make):
    """A is preempted for C's reader; C completes; D then holds the slot C had. A's reader
    takes A's first group and waits for the rest (no slot's reader idle long enough to
    preempt), and the server closes: every call ends (JobCancelled), nothing hangs, and
    no device state is left (the fixture)."""
    b = make()
    jobs = suspended(b, ["A", "B"])
    jobs["C"] = b.submit("C", [text("C")])
    first = Reader(("C", jobs["C"].results()))
    assert first.finished() and first.errors == {} and b.stats["preempted"] == 1
    b._runs.preempt_idle_s = 3600.0  # from here on, nobody is idle long enough
    jobs["D"] = b.submit("D", [text("D")])
    wait_until(lambda: any(r.held[0] is jobs["D"] for r in b._runs.suspended))
    reader = Reader(*[(name, jobs[name].results()) for name in "ABD"])
    wait_until(lambda: jobs["A"].starved())  # took its first group, waits for the next
    assert b._runs.preempted and b.engine.made.count(("A", 0)) == 1
    b.close(timeout=5)
    assert not b._thread.is_alive()
    assert reader.finished(), "a call waits forever for a preempted run after close()"
    assert set(reader.errors) == set("ABD")
    assert all(isinstance(e, JobCancelled) for e in reader.errors.values())
    assert reader.got == [("A", 0, 0)]
    finish(b, *jobs.values())
