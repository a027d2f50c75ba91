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
    holds its next group until it fits the same way; the worker runs the other
    jobs' pieces meanwhile, the example's run suspended between groups
    (`_hold_for`), so here too a slow reader holds back only its own work;
  * overall: admission reserves each job's worst case (its buffer bound plus
    the chunks its stream may hold) from `total_bytes`, and at most
    `queue_size` jobs exist at once; `submit` beyond either raises `QueueFull`.
Jobs whose client cancelled or whose deadline passed are dropped before they
run; a running piece whose jobs are all gone is abandoned between engine batches.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Sequence

from jaxattn.capture.part import ends_example
from service.admission import STREAM_CHUNKS, QueueFull, refusal, reservation
from service.admitted_call import EngineFailed, Job, JobCancelled, SlowReader

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
      buffer_bytes: most unsent result bytes per job (one example if larger).
      total_bytes: most bytes all admitted jobs may reserve together.
      stall_s: how long a job's client may read nothing while results wait.
      group_bytes: None, or the most output bytes the engine hands over at once: an
        example whose outputs exceed it (or the engine's output budget) runs in
        layer groups (`Engine.run(parts=True)`), each group put into the job as it
        lands; the worker computes the next group only once the client has taken
        enough that it fits the job's buffer (or the buffer is empty), so a call
        buffers about one group of such an example, never the example whole.
    """

    def __init__(
        self,
        engine,
        *,
        queue_size: int,
        window_s: float,
        max_batch_examples: int,
        merge: bool = True,
        buffer_bytes: int = 64 * _MiB,
        total_bytes: int = 1024 * _MiB,
        stall_s: float = 30.0,
        group_bytes: int | None = None,
    ):
        self.engine = engine
        self.group_bytes = group_bytes
        self.queue_size = queue_size
        self.window_s = window_s
        self.max_batch_examples = max_batch_examples
        self.merge = merge
        self.buffer_bytes = buffer_bytes
        self.total_bytes = total_bytes
        self.stall_s = stall_s
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # the worker waits here
        self._pending: collections.deque[Job] = collections.deque()  # runnable, by arrival
        self._served: dict[str | None, int] = {}  # client -> the last turn it was served in
        self._turn = 0
        self._jobs: set[Job] = set()  # admitted, not yet released
        self._reserved = 0
        self._closed = False
        self._admitting = True  # False once draining: new jobs are refused, old ones finish
        self._last_calls = 0  # new calls in the last merged batch (0: none yet)
        self._thread = threading.Thread(target=self._loop, name="jaxattn-batcher", daemon=True)
        self.stats = collections.Counter()
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
    ) -> Job:
        """Admit a job and queue it.

        Args:
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
        job.notify_worker = self._cond.notify_all
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
        """Stop the worker; jobs still queued are cancelled."""
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
            group = self._next_group()
            if group is None:
                return
            try:
                self._run(group)
            except Exception:  # never lose the worker; _run already failed the jobs
                log.exception("batcher: unexpected error")

    def _fits(self, job: Job) -> bool:
        """The job's next piece fits its unsent results (or it has none)."""
        n = job.piece(self.max_batch_examples, self.piece_bytes)
        return job.buffered == 0 or job.buffered + job.piece_bytes(n) <= self.buffer_bytes

    def _next_group(self) -> list[tuple[Job, int]] | None:
        with self._lock:
            while True:
                if self._closed:
                    return None
                wait = self._reap()
                first = next((j for j in self._in_turn() if self._fits(j)), None)
                if first is None:
                    self._cond.wait(wait)
                    continue
                if self.merge and first.scheduled == 0:
                    # Wait out the window unless enough same-spec work is here already.
                    until = first.submitted + self.window_s
                    if time.monotonic() < until and not first.dead:
                        if not self._enough(first.spec):
                            self._cond.wait(until - time.monotonic())
                            continue
                return self._take(first)

    def _reap(self) -> float | None:
        """Drop dead pending jobs; fail jobs whose client stalled. Returns how long
        the worker may sleep before the next stall could be due (None: no limit)."""
        for job in [j for j in self._pending if j.dead]:
            self._pending.remove(job)
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
        """The first job's piece plus same-spec pieces that fit; marks them running."""
        group, count, calls = [], 0, 0
        for job in self._in_turn():
            if job is not first and (not self.merge or job.spec != first.spec or job.dead):
                continue
            if not self._fits(job):
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

    def _hold_for(self, job: Job, size: int, nested: bool = False) -> None:
        """Wait (lock held) until the job's next layer group of `size` bytes fits its
        buffer beside what the client has not yet taken (or nothing is unsent), the job
        dies, or the batcher closes; a client that reads nothing for `stall_s`
        meanwhile is failed as a slow reader (`_reap`), which ends the wait.

        Meanwhile the worker serves the other calls: while any has a piece that fits,
        it runs that piece (`_run`, nested one deep, the grouped example's run
        suspended between its groups: on the device it keeps its hidden state and at
        most two groups' outputs), so a client that reads its long example slowly
        delays only itself. A nested run waits for its own grouped example plainly."""
        while (
            job.buffered > 0
            and job.buffered + size > self.buffer_bytes
            and not job.dead
            and not self._closed
        ):
            self.stats["group_waits"] += 1
            wait = self._reap()
            if job.dead:
                break
            other = None if nested else self._other_piece()
            if other is None:
                self._cond.wait(1.0 if wait is None else min(wait, 1.0))
                continue
            self.stats["served_while_waiting"] += 1
            self._lock.release()
            try:
                self._run(other, nested=True)
            finally:
                self._lock.acquire()

    def _other_piece(self) -> list[tuple[Job, int]] | None:
        """(lock held) The next fair group of pieces that fit, taken, or None: what the
        worker runs while a grouped example waits for its reader (`_hold_for`); no
        batching window (the worker is not idle)."""
        first = next((j for j in self._in_turn() if self._fits(j) and not j.dead), None)
        return None if first is None else self._take(first)

    def _peak(self, stat: str, value: int) -> None:
        self.stats[stat] = max(self.stats[stat], value)

    def _run(self, group: list[tuple[Job, int]], nested: bool = False) -> None:
        owners, tokenized = [], []
        for job, n in group:
            owners += [(job, job.scheduled + i) for i in range(n)]
            tokenized += job.tokenized[job.scheduled : job.scheduled + n]
        self.stats["batches"] += 1
        self.stats["jobs"] += sum(1 for job, _ in group if job.scheduled == 0)
        run, start = None, time.perf_counter()
        try:
            spec = group[0][0].spec
            if self.group_bytes:
                run = self.engine.run(
                    tokenized,
                    spec,
                    parts=True,
                    group_bytes=self.group_bytes,
                    # a dead job's example in groups stops, though others share the batch
                    skip=lambda pos: owners[pos][0].dead,
                )
            else:
                run = self.engine.run(tokenized, spec)
            for pos, cap in run:
                job, index = owners[pos]
                with self._lock:
                    size = job.put(index, cap)
                    if size:
                        self._peak("peak_job_buffered_bytes", job.buffered)
                        self._peak("peak_buffered_bytes", sum(j.buffered for j in self._jobs))
                    if not ends_example(cap):
                        self._hold_for(job, size, nested)  # flow control between groups
                    if all(j.dead for j, _ in group):
                        self.stats["abandoned"] += 1
                        return  # everyone left: stop computing (run.close() below)
        except Exception as e:
            log.error(
                "engine failed on a batch of %d requests: %s",
                len(group),
                type(e).__name__,
                exc_info=e,
            )
            with self._lock:
                for job, _ in group:
                    job.fail(EngineFailed(f"{type(e).__name__}: {e}"))
        finally:
            if run is not None and hasattr(run, "close"):
                try:
                    run.close()
                except Exception:
                    log.exception("engine: closing a run failed")
            with self._lock:
                for job, n in group:
                    job.running = False
                    job.scheduled += n
                    if job.remaining and not job.dead and not job.released:
                        self._pending.append(job)  # its next piece waits its turn
                self._cond.notify_all()
            if self.on_batch is not None:
                self.on_batch(len(tokenized), len(group), time.perf_counter() - start)
