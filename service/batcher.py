"""Dynamic micro-batching: concurrent requests with the same spec share engine calls.

One worker thread owns the engine. A request becomes a `Job` (its spec and
tokenised examples); the worker takes the oldest job, waits up to the batch
window for others with the same spec (or until `max_batch_examples` are
waiting), concatenates their examples into one `Engine.run` call and routes each
finished example back to its job. Jobs whose client cancelled or whose deadline
passed are dropped before they run; a running batch whose jobs are all gone is
abandoned between engine batches.

Admission is bounded: at most `queue_size` jobs exist at once (queued, running
or still streaming their results); `submit` beyond that raises `QueueFull`.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Iterator, Sequence

log = logging.getLogger("jaxattn.service")


class QueueFull(Exception):
    """The server is at its admitted-request limit."""


class JobCancelled(Exception):
    """The job's client went away (cancelled, deadline passed, server stopping)."""


class EngineFailed(Exception):
    """The engine raised while running the job's batch (a bug: INTERNAL)."""


_CANCELLED = object()


@dataclasses.dataclass(eq=False)
class Job:
    """One admitted request: its examples and the channel its results come back on."""

    spec: object
    encodings: Sequence
    deadline: float | None = None  # time.monotonic() seconds
    submitted: float = dataclasses.field(default_factory=time.monotonic)

    def __post_init__(self):
        self._results: queue.SimpleQueue = queue.SimpleQueue()
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        """Drop the job: it will not run, or stops receiving results."""
        if not self._cancelled.is_set():
            self._cancelled.set()
            self._results.put(_CANCELLED)

    @property
    def dead(self) -> bool:
        """Cancelled, or past its deadline: no one wants its results."""
        return self._cancelled.is_set() or (
            self.deadline is not None and time.monotonic() > self.deadline
        )

    def _put(self, item) -> None:
        self._results.put(item)

    def results(self) -> Iterator[tuple[int, object]]:
        """Yield (index, Capture) in input order, each as soon as it and all before it are ready.

        Raises:
          JobCancelled: the job was cancelled while waiting.
          EngineFailed: the engine failed on this job's batch.
        """
        ready: dict = {}
        for index in range(len(self.encodings)):
            while index not in ready:
                item = self._results.get()
                if item is _CANCELLED:
                    raise JobCancelled()
                if isinstance(item, BaseException):
                    raise EngineFailed(f"{type(item).__name__}: {item}") from item
                ready[item[0]] = item[1]
            yield index, ready.pop(index)


class MicroBatcher:
    """Runs jobs on an engine, merging concurrent same-spec jobs into one call.

    Args:
      engine: a `jaxattn.Engine` (only `run` is used, from one thread).
      queue_size: most jobs admitted at once.
      window_s: how long the oldest job waits for companions.
      max_batch_examples: most examples in one merged call.
      merge: False gives every job its own engine call.
    """

    def __init__(self, engine, *, queue_size: int, window_s: float, max_batch_examples: int,
                 merge: bool = True):  # fmt: skip
        self.engine = engine
        self.queue_size = queue_size
        self.window_s = window_s
        self.max_batch_examples = max_batch_examples
        self.merge = merge
        self._cond = threading.Condition()
        self._pending: collections.deque[Job] = collections.deque()
        self._admitted = 0
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="jaxattn-batcher", daemon=True)
        self.stats = collections.Counter()

    # -- admission -----------------------------------------------------------------

    def submit(self, spec, encodings: Sequence, deadline: float | None = None) -> Job:
        """Admit a job and queue it.

        Raises:
          QueueFull: `queue_size` jobs are already admitted.
          JobCancelled: the batcher is closed.
        """
        job = Job(spec, encodings, deadline)
        with self._cond:
            if self._closed:
                raise JobCancelled()
            if self._admitted >= self.queue_size:
                self.stats["rejected"] += 1
                raise QueueFull(
                    f"the server's queue is full ({self.queue_size} requests in progress); "
                    "retry later"
                )
            self._admitted += 1
            self._pending.append(job)
            self._cond.notify_all()
        return job

    def release(self, job: Job) -> None:
        """Free the job's slot (call once, when its call ends for any reason)."""
        job.cancel()
        with self._cond:
            self._admitted -= 1

    @property
    def admitted(self) -> int:
        """Jobs holding a slot now."""
        return self._admitted

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float | None = None) -> None:
        """Stop the worker; jobs still queued are cancelled."""
        with self._cond:
            self._closed = True
            for job in self._pending:
                job.cancel()
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

    def _next_group(self) -> list[Job] | None:
        with self._cond:
            while True:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return None
                first = self._pending[0]
                if first.dead:
                    self._pending.popleft()
                    self.stats["dropped"] += 1
                    continue
                if self.merge:
                    # Wait out the window unless enough same-spec work is here already.
                    until = first.submitted + self.window_s
                    while not self._closed and time.monotonic() < until:
                        if self._waiting_examples(first.spec) >= self.max_batch_examples:
                            break
                        self._cond.wait(until - time.monotonic())
                    if self._closed:
                        return None
                return self._take(first.spec)

    def _waiting_examples(self, spec) -> int:
        return sum(len(j.encodings) for j in self._pending if j.spec == spec and not j.dead)

    def _take(self, spec) -> list[Job]:
        group, count, keep = [], 0, collections.deque()
        for job in self._pending:
            room = self.merge and count + len(job.encodings) <= self.max_batch_examples
            fits = not group or room
            if job.spec == spec and fits and not job.dead:
                group.append(job)
                count += len(job.encodings)
            elif job.dead:
                self.stats["dropped"] += 1
            else:
                keep.append(job)
        self._pending = keep
        return group

    def _run(self, group: list[Job]) -> None:
        owners = [(job, i) for job in group for i in range(len(job.encodings))]
        encodings = [e for job in group for e in job.encodings]
        self.stats["batches"] += 1
        self.stats["jobs"] += len(group)
        run = self.engine.run(encodings, group[0].spec)
        try:
            for pos, cap in run:
                job, index = owners[pos]
                if not job.dead:
                    job._put((index, cap))
                if all(j.dead for j in group):
                    self.stats["abandoned"] += 1
                    return  # everyone left: stop computing (run.close() below)
        except Exception as e:
            log.exception("engine failed on a batch of %d requests", len(group))
            for job in group:
                job._put(e)
        finally:
            run.close()
