"""Dynamic micro-batching with bounded memory: concurrent same-spec requests share engine calls.

One worker thread owns the engine. A request becomes a `Job` (its spec and
tokenised examples). The worker takes the first job in turn that can run, waits up to
the batch window for others with the same spec (or until `max_batch_examples`
are waiting, or as many new calls as its last merged batch took: closed-loop
clients come back that many at a time), and runs one *piece* of each (the
next examples in input order, at most `max_batch_examples` of them and at
most half of `buffer_bytes` of output) in one `Engine.run` call, routing each
finished example back to its job. A job with examples left goes to the back of the queue, so a large
request cannot keep the engine from everyone else. Half, so that a large
request's next piece fits beside the one being sent: it computes while its
predecessor's chunks are encoded and sent (double buffering), instead of
waiting for the client to drain the whole buffer.

Turns are fair between clients (`_in_turn`): each client's jobs keep their
order, the clients' first jobs come before anyone's second, and among clients
the one served longest ago goes first; companions of a merged call are taken
in the same order. So a client that floods the queue delays another's request
by about one piece, not by its whole backlog.

Memory is bounded twice (admission: `service.admission`):
  * per request: a piece starts only when it fits the job's unsent results
    (`buffer_bytes`, or one example if larger), so a client that reads slowly
    holds back only its own work (flow control, not buffering); if it reads
    nothing for `stall_s` while its results wait, it is failed (SlowReader)
    and its call cancelled. An example run in layer groups (`group_bytes`)
    holds its next group until it fits the same way: its engine run is suspended
    between groups and the worker serves the other jobs meanwhile, resuming
    whichever suspended run's reader took enough first, so here too a slow reader
    holds back only its own work. At most `SUSPENDED_RUNS` runs are suspended at
    once (device memory): a piece that runs in groups waits for a free slot, or,
    if its reader waits for it, preempts a run whose reader has been idle, which
    restarts later (`service.grouped_runs`: a run's life between groups), so a
    client reading its calls in any order never waits on itself; pieces of whole
    examples start any time;
  * overall: admission reserves each job's worst case (its buffer bound plus
    the chunks its stream may hold) from `total_bytes`, and at most
    `queue_size` jobs exist at once; `submit` beyond either raises `QueueFull`.
Jobs whose client cancelled or whose deadline passed are dropped before they
run; a running piece whose jobs are all gone is abandoned between engine batches.

A job that generates first takes one step of its generation per turn, in the same
fair turns; when it may, and whether its first step joins, merges or waits for a
cache slot, `service.generation_turns` decides.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence

from jaxattn.capture.part import ends_example
from service.admission import STREAM_CHUNKS, QueueFull, refusal, reservation
from service.admitted_call import EngineFailed, Job, JobCancelled, SlowReader, engine_failure
from service.generation import GenerationRun
from service.generation_turns import GenerationTurns
from service.grouped_runs import PREEMPT_IDLE_S, GroupedRuns, Run

__all__ = [
    "STREAM_CHUNKS",
    "EngineFailed",
    "Job",
    "JobCancelled",
    "MicroBatcher",
    "QueueFull",
    "SlowReader",
]

log = logging.getLogger("jaxattn.service")
_MiB = 1 << 20


class MicroBatcher:
    """Runs jobs on an engine, merging concurrent same-spec jobs into one call.

    Args:
      engine: a `jaxattn.Engine` (`run` from one thread; `output_bytes`, when
        present, sizes pieces and reservations).
      queue_size: most jobs admitted at once.
      window_s: how long the oldest job waits for companions.
      max_batch_examples: most examples in one merged call (and in one piece).
      merge: False gives every piece its own engine call.
      join: False keeps a generating call from joining a shared generation under way
        (`service.generation.SharedGeneration.join`, `service.generation_turns`): it
        starts a run of its own.
      buffer_bytes: most unsent result bytes per job (one example if larger).
      total_bytes: most bytes all admitted jobs may reserve together.
      stall_s: how long a job's client may read nothing while results wait.
      group_bytes: None, or the most output bytes the engine hands over at once: an
        example whose outputs exceed it (or the engine's output budget) runs in
        layer groups (`Engine.run(parts=True)`), each group put into the job as it
        lands; the worker computes the next group only once the client has taken
        enough that it fits the job's buffer (or the buffer is empty), so a call
        buffers about one group of such an example, never the example whole.
      preempt_idle_s: how long the reader of a run suspended between layer groups must
        have taken nothing before the run may be preempted for another call's reader
        that waits (`service.grouped_runs`).
    """

    def __init__(
        self,
        engine,
        *,
        queue_size: int,
        window_s: float,
        max_batch_examples: int,
        merge: bool = True,
        join: bool = True,
        buffer_bytes: int = 64 * _MiB,
        total_bytes: int = 1024 * _MiB,
        stall_s: float = 30.0,
        group_bytes: int | None = None,
        preempt_idle_s: float = PREEMPT_IDLE_S,
    ):
        self.engine = engine
        self.group_bytes = group_bytes
        self.queue_size = queue_size
        self.window_s = window_s
        self.max_batch_examples = max_batch_examples
        self.merge = merge
        self.join = join
        self.buffer_bytes = buffer_bytes
        self.total_bytes = total_bytes
        self.stall_s = stall_s
        self._wakes_at: float | None = None  # the worker asleep until then (`_sleep`)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # the worker waits here
        self._pending: collections.deque[Job] = collections.deque()  # runnable, by arrival
        # runs waiting between layer groups for a reader: suspended or preempted
        self._runs = GroupedRuns(buffer_bytes, preempt_idle_s)
        self._served: dict[str | None, int] = {}  # client -> the last turn it was served in
        self._turn = 0
        self._jobs: set[Job] = set()  # admitted, not yet released
        self._reserved = 0
        self._closed = False
        self._admitting = True  # False once draining: new jobs are refused, old ones finish
        self._last_calls = 0  # new calls in the last merged batch (0: none yet)
        self._thread = threading.Thread(target=self._loop, name="jaxattn-batcher", daemon=True)
        self.stats = collections.Counter()
        # when a generating job may take a step, and with whom (`service.generation_turns`)
        self._generations = GenerationTurns(engine, self.stats)
        # Told (examples, requests, seconds) after each engine call (service/metrics.py).
        self.on_batch: Callable[[int, int, float], None] | None = None

    # -- admission -----------------------------------------------------------------

    def submit(
        self,
        spec,
        tokenized: Sequence,
        deadline: float | None = None,
        *,
        chunk_bytes: int = 0,
        client: str | None = None,
        coalesce: bool = False,
        generation=None,
    ) -> Job:
        """Admit a job and queue it.

        Args:
          tokenized: its examples; with `generation`, each at its longest (the worst
            case it is sized and admitted at).
          generation: a `service.generation.GenerationAsk`: continue its prompts
            first, a step per turn, then capture prompt + continuation.
          chunk_bytes: the stream's chunk size bound (reserved STREAM_CHUNKS times).
          coalesce: the stream packs several examples' items per message
            (CaptureRequest.coalesce; `admission.reservation`).
          client: who sent it (the token file's name): jobs take turns by client.

        Raises:
          QueueFull: `queue_size` jobs are admitted, or the job's worst-case
            bytes do not fit what the others reserved.
          JobCancelled: the batcher is closed.
        """
        sizes, reserve = reservation(
            self.engine,
            spec,
            tokenized,
            buffer_bytes=self.buffer_bytes,
            chunk_bytes=chunk_bytes,
            coalesce=coalesce,
            group_bytes=self.group_bytes,
        )
        job = Job(spec, tokenized, self._lock, sizes, deadline, reserve, client=client)
        if generation is not None:
            job.generation = GenerationRun(generation)
        job.notify_worker = self._cond.notify_all
        job.stall_seen = self._sees_stall
        with self._lock:
            if self._closed or not self._admitting:
                raise JobCancelled()
            why = refusal(
                admitted=len(self._jobs),
                queue_size=self.queue_size,
                reserve=reserve,
                reserved=self._reserved,
                total_bytes=self.total_bytes,
            )
            if why is not None:
                self.stats["rejected"] += 1
                raise why
            self._jobs.add(job)
            self._reserved += reserve
            self._pending.append(job)
            self._cond.notify_all()
        return job

    def release(self, job: Job) -> None:
        """Free the job's slot and reservation (idempotent; call when its call ends)."""
        with self._lock:
            self._release_locked(job)
            self._cond.notify_all()

    def _release_locked(self, job: Job) -> None:
        if not job.cancelled:
            job.cancel_locked()
        if not job.released:
            job.released = True
            self._jobs.discard(job)
            self._reserved -= job.reserved

    @property
    def piece_bytes(self) -> int:
        """Most output bytes of one piece (one example if larger): half the buffer, so
        the next piece can compute while this one is sent."""
        return self.buffer_bytes // 2

    @property
    def admitted(self) -> int:
        """Jobs holding a slot now."""
        return len(self._jobs)

    @property
    def pending(self) -> int:
        """Admitted jobs waiting for the engine (their next piece queued) now."""
        return len(self._pending)

    @property
    def buffered_bytes(self) -> int:
        """Result bytes waiting for (or being sent to) their clients now."""
        with self._lock:
            return sum(j.buffered for j in self._jobs)

    @property
    def reserved_bytes(self) -> int:
        return self._reserved

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def drain(self, timeout: float) -> bool:
        """Refuse new jobs, then wait up to `timeout` s until every admitted job is
        released; True when none is left."""
        end = time.monotonic() + timeout
        with self._lock:
            self._admitting = False
            while self._jobs and (left := end - time.monotonic()) > 0:
                self._cond.wait(left)
            return not self._jobs

    def close(self, timeout: float | None = None) -> None:
        """Stop the worker; jobs still queued are cancelled, and so are those whose run
        waits between layer groups for a reader (it is stopped, not finished)."""
        with self._lock:
            self._closed = True
            for job in self._pending:
                job.cancel_locked()
            self._pending.clear()
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    # -- the worker ----------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            step = self._next_run()
            if step is None:
                return
            run, preempted = step
            if isinstance(run, Job):  # a generation's turn
                self._generate(run)
                continue
            try:
                if preempted is not None:  # its device state goes before `run` starts
                    self._close(preempted)
                self._advance(run)
            except Exception:  # never lose the worker; _advance already failed the jobs
                log.exception("batcher: unexpected error")

    def _fits(self, job: Job) -> bool:
        """The job's next piece fits its unsent results (or it has none)."""
        n = job.piece(self.max_batch_examples, self.piece_bytes)
        return job.buffered == 0 or job.buffered + job.piece_bytes(n) <= self.buffer_bytes

    def _grouped(self, job: Job) -> bool:
        """The job's next piece has an example that runs in layer groups: as the engine
        decides it (`Engine.group_sizes`: over `group_bytes` or its example budget, at its
        padded length), or, for an engine that does not say, its outputs exceed
        `group_bytes`."""
        if not self.group_bytes:
            return False
        n = job.piece(self.max_batch_examples, self.piece_bytes)
        decides = getattr(self.engine, "group_sizes", None)  # the engine's own decision
        if decides is not None:
            todo = job.tokenized[job.scheduled : job.scheduled + n]
            return any(decides(todo, job.spec, self.group_bytes))
        return any(size > self.group_bytes for size in job.sizes[job.scheduled :][:n])

    def _may_start(self, job: Job) -> bool:
        """(lock held) The job's next piece may start now: it fits its buffer, and if it
        runs in layer groups, a slot for a suspended run is free (`GroupedRuns.full`);
        a job generating may take its next step as `GenerationTurns.may_start` decides
        (its first only while fewer than `CACHED_GENERATIONS` runs hold caches, or joining)."""
        if job.dead:
            return False
        if job.generation is not None:
            return self._generations.may_start(job, self._pending, join=self.join)
        if not self._fits(job):
            return False
        return not self._runs.full or not self._grouped(job)

    def _next_run(self) -> tuple[Run | Job, Run | None] | None:
        """What the worker does next (waiting until there is something): a run to start
        or go on with, and a suspended run to preempt first or None. A waiting run whose
        held job's reader took enough (or that died, or the batcher closed: `GroupedRuns.
        next`), else a new run of the first fair group of pieces that may start, else a
        preemption for a reader that waits (`_preemption`); None once closed and no run
        is left waiting."""
        with self._lock:
            while True:
                wait = None if self._closed else self._reap()
                run = self._runs.next(self._closed)
                if run is not None or self._closed:
                    return None if run is None else (run, None)
                turn = self._in_turn()
                first = next((j for j in turn if self._may_start(j)), None)
                if first is None:
                    step, due = self._preemption()
                    if step is not None:
                        return step
                    if self._runs:  # a held job's deadline tells no one: look again
                        wait = 1.0 if wait is None else min(wait, 1.0)
                    if due is not None:  # a slot's reader may be idle long enough by then
                        wait = due if wait is None else min(wait, due)
                    self._sleep(wait)
                    continue
                if first.generation is not None:  # its next step, alone (`_generate`)
                    window = self._generations.ready(
                        first,
                        self._pending,
                        turn,
                        join=self.join,
                        window_s=self.window_s if self.merge else None,
                    )
                    if window is not None:  # the window, for companions to merge with
                        self._sleep(window)
                        continue
                    self._pending.remove(first)
                    first.running = True
                    self._turn += 1
                    self._served[first.client] = self._turn
                    return first, None
                if self._runs:
                    self.stats["served_while_waiting"] += 1  # no window: not idle
                elif self.merge and first.scheduled == 0:
                    # Wait out the window unless enough same-spec work is here already.
                    until = first.submitted + self.window_s
                    if time.monotonic() < until and not first.dead:
                        if not self._enough(first.spec):
                            self._sleep(until - time.monotonic())
                            continue
                return Run(self._take(first)), None

    def _sleep(self, seconds: float | None) -> None:
        """(lock held) The worker waits on its condition for at most `seconds` (None: until
        told), noting until when: `_sees_stall`."""
        self._wakes_at = math.inf if seconds is None else time.monotonic() + seconds
        try:
            self._cond.wait(seconds)
        finally:
            self._wakes_at = None

    def _sees_stall(self, job: Job) -> bool:
        """(lock held) Whether the worker looks at `job`'s stall clock by the time it can
        be due without being told: it is not asleep (it reaps before it sleeps again), or
        it wakes by then (`_reap` counts from `progress_at`, which only moves later)."""
        return self._wakes_at is None or self._wakes_at <= job.progress_at + self.stall_s

    def _preemption(self) -> tuple[tuple[Run, Run] | None, float | None]:
        """(lock held) Every slot is held and a reader waits for an example that needs one
        (`Job.starved`: a preempted run's, first, or a pending piece's in layer groups):
        the run to start for it and the suspended run it preempts (`GroupedRuns.victim`),
        or (None, how long until a victim may be idle enough; None: no need or none)."""
        if not self._runs.full:
            return None, None
        restart = next((r for r in self._runs.preempted if r.held[0].starved()), None)
        job = None
        if restart is None:
            job = next(
                (
                    j
                    for j in self._in_turn()
                    if j.starved()
                    and not j.dead
                    and j.generation is None
                    and self._fits(j)
                    and self._grouped(j)
                ),
                None,
            )
            if job is None:
                return None, None
        victim, due = self._runs.victim()
        if victim is None:
            return None, due
        self.stats["preempted"] += 1
        log.debug(
            "batcher: preempted a run whose reader took nothing for %.1f s, for another "
            "call's waiting reader (it restarts from its first layer later)",
            time.monotonic() - max(victim.suspended_at, victim.held[0].progress_at),
        )
        if restart is not None:
            self._runs.preempted.remove(restart)
            return (restart, victim), None
        return (Run(self._take(job)), victim), None

    def _reap(self) -> float | None:
        """Drop dead pending jobs; fail jobs whose client stalled. Returns how long
        the worker may sleep before the next stall could be due (None: no limit)."""
        for job in [j for j in self._pending if j.dead]:
            self._pending.remove(job)
            self._generations.drop(job)  # a generation's key/value caches freed now
            self.stats["dropped"] += 1
            if not job.cancelled and job.error is None:  # past its deadline: wake its handler
                job.cancel_locked()
        now, wait, stalled = time.monotonic(), None, []
        for job in self._jobs:
            if job.buffered > 0 and not job.waiting and not job.dead:
                due = job.progress_at + self.stall_s
                if due <= now:
                    stalled.append(job)
                else:
                    wait = due - now if wait is None else min(wait, due - now)
        for job in stalled:
            self.stats["stalled"] += 1
            job.fail(
                SlowReader(
                    f"the client read nothing for {self.stall_s:g} s while "
                    f"{job.buffered} bytes of results waited"
                )
            )
            if job in self._pending:
                self._pending.remove(job)
            self._release_locked(job)  # its slot and reservation, at once
            # Then cancel the call (its send may be blocked): whoever the cancel
            # wakes finds the slot already free.
            if job.on_stall is not None:
                threading.Thread(target=job.on_stall, daemon=True).start()
        return wait

    def _in_turn(self) -> list[Job]:
        """The pending jobs in fair turn: the n-th job of every client before any
        client's (n+1)-th, clients served longest ago (or never) first, then arrival."""
        nth: collections.Counter = collections.Counter()
        keyed = []
        for i, job in enumerate(self._pending):
            keyed.append((nth[job.client], self._served.get(job.client, -1), i, job))
            nth[job.client] += 1
        keyed.sort(key=lambda k: k[:3])
        return [k[3] for k in keyed]

    def _enough(self, spec) -> bool:
        """Whether the oldest new job may go before its window ends: a full batch of
        its spec waits, or as many new calls as the last merged batch took (clients
        in a closed loop come back about as many at a time: waiting longer only
        delays them)."""
        waiting = [j for j in self._pending if j.spec == spec and not j.dead]
        examples = sum(min(j.remaining, self.max_batch_examples) for j in waiting)
        calls = sum(1 for j in waiting if j.scheduled == 0)
        return examples >= self.max_batch_examples or 0 < self._last_calls <= calls

    def _take(self, first: Job) -> list[tuple[Job, int]]:
        """The first job's piece plus same-spec pieces that may start; marks them running.

        A piece that runs in layer groups (`_grouped`) is never merged with another
        call's: its run may be suspended for its reader (`_advance`), and another call's
        examples in the same run would wait with it, their reader for another's (the
        engine runs grouped examples one at a time anyway: merging gains nothing)."""
        group, count, calls = [], 0, 0
        alone = self._grouped(first)
        for job in self._in_turn():
            if job is not first and (
                alone
                or not self.merge
                or job.generation is not None
                or job.spec != first.spec
                or self._grouped(job)
            ):
                continue
            if not self._may_start(job):
                continue
            n = job.piece(self.max_batch_examples, self.piece_bytes)
            if group and count + n > self.max_batch_examples:
                continue
            group.append((job, n))
            count += n
            calls += job.scheduled == 0
            self._pending.remove(job)
            job.running = True
            if job is first and not self.merge:
                break
        self._turn += 1
        for job, _ in group:
            self._served[job.client] = self._turn
        if self.merge and first.scheduled == 0:
            self._last_calls = calls
        return group

    def _generate(self, job: Job) -> None:
        """One step of the job's generation (`GenerationTurns.step`, then `stepped`).
        Then it queues again for its next turn (or, once closed, is cancelled)."""
        made, sequences = self._generations.step(job)
        with self._lock:
            try:
                if self._generations.stepped(job, made, sequences) and not job.released:
                    self._requeue(job)  # its next step (or piece) waits its turn
            except Exception as e:  # never lose the worker: the job fails, not every call
                log.exception("batcher: unexpected error after a generation's step")
                job.fail(engine_failure(e))
                job.running = False
                self._generations.drop(job)
            self._cond.notify_all()

    def _requeue(self, job: Job) -> None:
        """(lock held) The job's next turn waits in the queue; once closed it is
        cancelled instead (no worker will run it)."""
        if self._closed:
            job.cancel_locked()
        else:
            self._pending.append(job)

    def _advance(self, run: Run) -> None:
        """Start, resume or restart `run`, routing each example (or layer group) to its
        job, until the engine is done, every job left, or a job's next group must wait
        for its reader (`GroupedRuns.holds`): then the run is suspended (its engine
        iterator kept: on the device its hidden state and at most two groups' outputs)
        and the worker goes on with something else (`_next_run`). Once closed, a run
        that would wait stops instead, its calls cancelled (the server is stopping)."""
        suspended = False
        try:
            if run.it is None:
                if not run.started:
                    self.stats["batches"] += 1
                    self.stats["jobs"] += sum(1 for job, _ in run.group if job.scheduled == 0)
                    run.start = time.perf_counter()
                elif self._stopped(run):  # preempted, and gone or closed since
                    return
                run.open(self.engine, run.group[0][0].spec, self.group_bytes)
            elif self._stopped(run):  # resumed
                return
            for job, index, cap in run.items():
                with self._lock:
                    size = job.put(index, cap)
                    if size:
                        peak = self.stats["peak_job_buffered_bytes"]
                        self.stats["peak_job_buffered_bytes"] = max(peak, job.buffered)
                    if all(j.dead for j, _ in run.group):
                        self.stats["abandoned"] += 1
                        return  # everyone left: stop computing (run.close() below)
                    if not ends_example(cap) and self._runs.holds(job, size):
                        if self._stopped(run, locked=True):
                            return
                        self.stats["group_waits"] += 1
                        self._runs.suspend(run, job, size)
                        suspended = True
                        return  # flow control between groups: resumed by `_next_run`
        except Exception as e:
            log.error(
                "engine failed on a batch of %d requests: %s",
                len(run.group),
                type(e).__name__,
                exc_info=e,
            )
            with self._lock:
                for job, _ in run.group:
                    job.fail(engine_failure(e))
        finally:
            if not suspended:
                self._finish(run)

    def _stopped(self, run: Run, locked: bool = False) -> bool:
        """Whether a run about to wait, resumed or restarted stops here: every job left
        (abandoned), or the batcher closed (its jobs cancelled: their calls end,
        UNAVAILABLE)."""
        if not locked:
            with self._lock:
                return self._stopped(run, locked=True)
        if all(j.dead for j, _ in run.group):
            self.stats["abandoned"] += 1
            return True
        if self._closed:
            for job, _ in run.group:
                job.cancel_locked()
            return True
        return False

    def _close(self, run: Run) -> None:
        """Close a run's engine iterator (it ends, or waits preempted: `GroupedRuns`)."""
        try:
            run.close()
        except Exception:
            log.exception("engine: closing a run failed")

    def _finish(self, run: Run) -> None:
        """Close the run's engine iterator; its jobs with examples left queue again (or,
        once closed, are cancelled: no worker will run them)."""
        self._close(run)
        with self._lock:
            for job, n in run.group:
                job.running = False
                job.scheduled += n
                if job.remaining and not job.dead and not job.released:
                    self._requeue(job)  # its next piece waits its turn
            self._cond.notify_all()
        if self.on_batch is not None:
            self.on_batch(len(run.tokenized), len(run.group), time.perf_counter() - run.start)
