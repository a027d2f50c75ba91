"""The life of an engine run whose examples come in layer groups: started, suspended between
groups for a reader, resumed, preempted, restarted.

The batcher's one worker (`service.micro_batching`) starts a `Run` for each engine call.
When an example runs in layer groups (`Engine.run(parts=True)`), its next group waits
until it fits its call's buffer beside what the client has not taken (`GroupedRuns.holds`);
meanwhile the run is *suspended*: its engine iterator kept, on the device its hidden state
and at most two groups' outputs, while the worker serves other calls. It *resumes* once its
reader took enough (or waits for it, or left). At most `SUSPENDED_RUNS` runs are suspended
at once (device memory), so a piece that runs in groups waits for a free slot.

A reader may take its calls in any order (HTTP/2 lets one client open many streams): reading
a call whose example cannot start, because every slot is held by a run whose reader reads
something else, would wait on itself until the slow-reader cut-off. So a run is *preempted*
when a job's reader waits for an example that needs a slot (`Job.starved`) and every slot is
held: the suspended run whose reader has taken nothing for longest, at least
`preempt_idle_s`, has its engine iterator closed (its device state freed) and waits in
`GroupedRuns.preempted`. It restarts from its first layer once its reader took enough and a
slot is free, before any new piece (a preempted run keeps its place; one whose reader waits
for it may preempt in turn), over the examples it has not finished: the groups it already put
into its job are computed again but not put (an example in groups runs alone: the same
programs on the same input; their boundaries are checked, `Diverged`), the next ones are
put as before. The worst case costs compute, not memory: an example preempted again and
again computes its first groups again each time.

No livelock: a run is preempted only while suspended, suspended only after putting a new
group, and a restart puts at least one new group before it can be suspended again; groups
put stay in their job. So each preemption follows one more group delivered, and a reader
that keeps taking (within `preempt_idle_s`) never loses its run.
"""

from __future__ import annotations

import collections
import time

from jaxattn.capture.part import ends_example
from service.admitted_call import Job, capture_bytes

# Most engine runs suspended between an example's layer groups at once (each keeps its
# hidden state and up to two groups' outputs on the device): a piece that runs in groups
# (`MicroBatcher._grouped`) starts only while fewer are suspended, or by preempting one.
SUSPENDED_RUNS = 2
# How long a suspended run's reader must have taken nothing before the run may be
# preempted for another reader that waits: a reader that keeps reading keeps its run.
PREEMPT_IDLE_S = 1.0


class Diverged(RuntimeError):
    """A restarted run's recomputed layer groups are not those it put before (a bug)."""


def _boundary(item) -> tuple:
    """What a recomputed part must match: its group, the example's cuts, its bytes."""
    return getattr(item, "part", None), getattr(item, "cuts", None), capture_bytes(item)


class Run:
    """One engine call: its group of (job, examples) pieces and the engine's iterator.

    While suspended, `held` is (the job whose next group waits, the bytes of its last
    group) and `suspended_at` when it began waiting. A preempted run has no iterator;
    `open` restarts it over the examples not yet finished, `items` dropping the parts
    it put before."""

    def __init__(self, group: list[tuple[Job, int]]):
        self.group = group
        self.owners: list[tuple[Job, int]] = []  # position -> (job, its example index)
        self.tokenized: list = []
        for job, n in group:
            self.owners += [(job, job.scheduled + i) for i in range(n)]
            self.tokenized += job.tokenized[job.scheduled : job.scheduled + n]
        self.it = None
        self.start = time.perf_counter()
        self.held: tuple[Job, int] | None = None
        self.suspended_at = 0.0
        self.restarts = 0  # times `open`ed again after a preemption
        self._order: list[int] = []  # the engine's position -> position in the run
        self._ended: set[int] = set()  # positions whose example was put whole
        self._put: dict[int, list[tuple]] = {}  # position -> boundaries of parts put
        self._redo: dict[int, collections.deque] = {}  # parts to compute again, not put

    @property
    def started(self) -> bool:
        """Opened before (it may be preempted: no iterator now)."""
        return bool(self._order)

    def open(self, engine, spec, group_bytes: int | None) -> None:
        """Start the engine on the examples not finished (all, the first time)."""
        if self.started:
            self.restarts += 1
        self._order = [p for p in range(len(self.tokenized)) if p not in self._ended]
        self._redo = {p: collections.deque(b) for p, b in self._put.items()}
        todo = [self.tokenized[p] for p in self._order]
        if group_bytes:
            self.it = engine.run(
                todo,
                spec,
                parts=True,
                group_bytes=group_bytes,
                # a dead job's example in groups stops, though others share the batch
                skip=lambda pos: self.owners[self._order[pos]][0].dead,
            )
        else:
            self.it = engine.run(todo, spec)

    def items(self):
        """(job, example index, Capture or part) of each item the engine hands over that
        the job has not had: after a restart, the parts put before are checked and dropped.

        Raises:
          Diverged: a recomputed part is not the one put before.
        """
        for pos, item in self.it:
            p = self._order[pos]
            redo = self._redo.get(p)
            if redo:
                want, got = redo.popleft(), _boundary(item)
                if got != want:
                    raise Diverged(f"a restarted example's layer group {got} is not {want}")
                continue
            if ends_example(item):
                self._ended.add(p)
                self._put.pop(p, None)
            else:
                self._put.setdefault(p, []).append(_boundary(item))
            job, index = self.owners[p]
            yield job, index, item

    def close(self) -> None:
        """Close the engine iterator (its device state goes); `open` may start it again."""
        it, self.it = self.it, None
        if it is not None and hasattr(it, "close"):
            it.close()


class GroupedRuns:
    """The runs waiting between layer groups: suspended (iterator kept, at most
    `SUSPENDED_RUNS`) or preempted (closed, to restart). Guarded by the batcher's lock.

    Args:
      buffer_bytes: most unsent result bytes per job (the batcher's).
      preempt_idle_s: how long a suspended run's reader must have taken nothing before
        the run may be preempted (`victim`).
    """

    def __init__(self, buffer_bytes: int, preempt_idle_s: float = PREEMPT_IDLE_S):
        self.buffer_bytes = buffer_bytes
        self.preempt_idle_s = preempt_idle_s
        self.suspended: list[Run] = []
        self.preempted: list[Run] = []

    def __bool__(self) -> bool:
        return bool(self.suspended or self.preempted)

    @property
    def full(self) -> bool:
        """No slot is free: a piece that runs in groups may not start now."""
        return len(self.suspended) >= SUSPENDED_RUNS

    def holds(self, job: Job, size: int) -> bool:
        """Whether the job's next layer group, about `size` bytes like its last, must
        wait: it does not fit the job's buffer beside what the client has not taken, and
        the client is not itself waiting for this run (`Job.starved`: its next example
        in input order is not in yet, so only going on frees the buffer)."""
        return (
            job.buffered > 0
            and job.buffered + size > self.buffer_bytes
            and not job.dead
            and not job.starved()
        )

    def suspend(self, run: Run, job: Job, size: int) -> None:
        run.held, run.suspended_at = (job, size), time.monotonic()
        self.suspended.append(run)

    def next(self, closed: bool) -> Run | None:
        """A run to go on with now, taken out: once closed, any (it stops); else a
        suspended one whose held group fits now (or whose job died), else a preempted
        one whose jobs all left, or, with a slot free, whose held group fits now."""
        if closed:
            waiting = self.suspended or self.preempted
            return waiting.pop(0) if waiting else None
        run = next((r for r in self.suspended if not self.holds(*r.held)), None)
        if run is not None:
            self.suspended.remove(run)
            return run
        run = next(
            (
                r
                for r in self.preempted
                if all(j.dead for j, _ in r.group) or not (self.full or self.holds(*r.held))
            ),
            None,
        )
        if run is not None:
            self.preempted.remove(run)
        return run

    def starved(self) -> Run | None:
        """A preempted run whose reader waits for it (it may preempt another), taken out."""
        run = next((r for r in self.preempted if r.held[0].starved()), None)
        if run is not None:
            self.preempted.remove(run)
        return run

    def victim(self) -> tuple[Run | None, float | None]:
        """The suspended run to preempt for a waiting reader, moved to `preempted` (the
        caller closes it before starting another): the one whose reader has taken
        nothing for longest, at least `preempt_idle_s`. Else (None, how long until one
        may be; None: none may, every slot's reader is reading)."""
        now, best, due = time.monotonic(), None, None
        for run in self.suspended:
            job = run.held[0]
            if job.waiting:  # it is taking its group now: not idle
                continue
            idle = now - max(run.suspended_at, job.progress_at)
            if idle >= self.preempt_idle_s:
                if best is None or idle > best[0]:
                    best = (idle, run)
            else:
                left = self.preempt_idle_s - idle
                due = left if due is None else min(due, left)
        if best is None:
            return None, due
        run = best[1]
        self.suspended.remove(run)
        self.preempted.append(run)
        return run, None
