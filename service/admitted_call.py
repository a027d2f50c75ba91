"""One admitted Capture call inside the batcher: its examples and its bounded result buffer.

The batcher's worker puts each finished example into the job; the call's
handler takes them out in input order and streams them. Everything here is
guarded by the batcher's lock (`Job.lock`, shared by all jobs) so the worker
can weigh every job's buffer at once.

Buffered bytes of a job = the tensors of examples put and not yet fully sent
(examples waiting for an earlier one count too: the engine finishes them in
length order, not input order). The batcher only starts a piece of a job when
the piece fits the job's buffer limit, so the worker never blocks on a slow
reader and the buffer never grows past the limit (or one example, if larger).
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from jaxattn.capture.part import ends_example
from jaxattn.errors import DeviceMemoryError, HostMemoryError


class JobCancelled(Exception):
    """The job's client went away (cancelled, deadline passed, server stopping)."""


class EngineFailed(Exception):
    """The engine raised while running the job's batch (a bug: INTERNAL)."""


class DeviceMemoryExhausted(EngineFailed):
    """The job's work does not fit the device's memory even alone
    (`jaxattn.DeviceMemoryError`, after the engine's own halving): not a bug, a request
    too large for this device (RESOURCE_EXHAUSTED, its `limit`)."""

    limit = "device_memory"


class HostMemoryExhausted(DeviceMemoryExhausted):
    """XLA's pinned host pool ran out under the job (`jaxattn.HostMemoryError`): results
    held past it, not a bug (RESOURCE_EXHAUSTED, "host_memory")."""

    limit = "host_memory"


def engine_failure(error: BaseException) -> EngineFailed:
    """What a job fails with when the engine raised `error` running it."""
    kind = EngineFailed
    if isinstance(error, HostMemoryError):
        kind = HostMemoryExhausted
    elif isinstance(error, DeviceMemoryError):
        kind = DeviceMemoryExhausted
    return kind(f"{type(error).__name__}: {error}")


class SlowReader(Exception):
    """The client read nothing for too long while its results waited (RESOURCE_EXHAUSTED)."""


def capture_bytes(cap) -> int:
    """Host bytes of a Capture's tensors (anything else counts as 0)."""
    tensors = getattr(cap, "tensors", None) or {}
    return sum(getattr(t, "nbytes", 0) for t in tensors.values())


@dataclasses.dataclass(eq=False)
class Job:
    """One admitted request. Build it with `MicroBatcher.submit`.

    Attributes:
      spec: the engine's CaptureSpec (jobs with equal specs may share a call).
      tokenized: the tokenised examples.
      sizes: estimated output bytes of each example (0 when unknown).
      deadline: time.monotonic() after which nobody wants the results.
      reserved: bytes of the server's buffer budget this job holds.
      client: who sent it (a token file's client name; None: anonymous); the
        batcher serves clients in turn.
      generation: a `service.generation.GenerationRun` while the job's texts are still
        being continued (CaptureRequest.generate; `tokenized` and `sizes` are their
        worst case until it ends), else None.
    """

    spec: object
    tokenized: Sequence
    lock: threading.Lock
    sizes: Sequence[int] = ()
    deadline: float | None = None
    reserved: int = 0
    submitted: float = dataclasses.field(default_factory=time.monotonic)
    client: str | None = None
    generation: object | None = None

    def __post_init__(self):
        self.sizes = tuple(self.sizes) or (0,) * len(self.tokenized)
        self.ready = threading.Condition(self.lock)  # the handler waits here
        self.scheduled = 0  # examples handed to the engine so far (a prefix)
        self.running = False  # a piece of it is in the engine now
        self.buffered = 0  # bytes put and not yet sent (see module doc)
        self.error: Exception | None = None
        self.cancelled = False
        self.released = False
        self.progress_at = self.submitted  # last time the handler took or sent something
        self.waiting = False  # the handler waits for the worker (so it cannot be stalled)
        self.on_stall: Callable[[], None] | None = None  # cancels the gRPC call
        # index -> its items put and not yet taken: a Capture, or an example's layer-group
        # parts (`jaxattn.capture.part.CapturePart`) in order, as they land
        self._items: dict[int, collections.deque[tuple[object, int]]] = {}
        self._next = 0  # the example `results` yields (the next item of) next
        # The batcher's worker condition (same lock): told whenever buffered bytes
        # shrink while examples remain to compute (`_sent`), or the job dies, so a job
        # held back by its buffer can run again.
        self.notify_worker: Callable[[], None] = lambda: None
        # The batcher's check that its worker will look at this job's stall clock by
        # the time it could be due (same lock; `MicroBatcher._sees_stall`); else it
        # tells the worker (`notify_worker`).
        self.stall_seen: Callable[[Job], bool] = lambda job: False
        self._ended = 0  # examples put whole (a Capture, or an example's last part)

    # -- state (call with `lock` held) ----------------------------------------------

    @property
    def dead(self) -> bool:
        """Cancelled, failed, or past its deadline: no one wants more results."""
        return self.cancelled or self.error is not None or self.past_deadline()

    def past_deadline(self) -> bool:
        """Its deadline has passed (the batcher may see that before gRPC does)."""
        return self.deadline is not None and time.monotonic() > self.deadline

    @property
    def remaining(self) -> int:
        return len(self.tokenized) - self.scheduled

    def starved(self) -> bool:
        """The handler waits for an item the worker has not put yet (its next example in
        input order): holding back the job's next layer group cannot free its buffer."""
        return self.waiting and not self._items.get(self._next)

    def piece(self, max_examples: int, max_bytes: int) -> int:
        """How many of the next unscheduled examples to run now: at most
        `max_examples`, and at most `max_bytes` of output (at least one)."""
        n, total = 0, 0
        for size in self.sizes[self.scheduled :]:
            if n >= max_examples or (n and total + size > max_bytes):
                break
            n, total = n + 1, total + size
        return n

    def piece_bytes(self, n: int) -> int:
        return sum(self.sizes[self.scheduled : self.scheduled + n])

    def put(self, index: int, cap) -> int:
        """Store a finished example, or the next layer-group part of one (worker side);
        returns its bytes (0 if dropped)."""
        if self.dead:
            return 0
        size = capture_bytes(cap)
        self._items.setdefault(index, collections.deque()).append((cap, size))
        self.buffered += size
        self._ended += ends_example(cap)
        self.ready.notify_all()
        return size

    def fail(self, error: Exception) -> int:
        """Fail the job and drop what it buffered; returns the bytes freed."""
        if self.error is None and not self.cancelled:
            self.error = error
        return self._drop()

    def cancel_locked(self) -> int:
        self.cancelled = True
        return self._drop()

    def _drop(self) -> int:
        freed = sum(size for items in self._items.values() for _, size in items)
        self._items.clear()
        self.buffered -= freed
        self.ready.notify_all()
        self.notify_worker()
        return freed

    # -- the handler's side ---------------------------------------------------------

    def cancel(self) -> None:
        """Drop the job: it will not run, or stops receiving results (idempotent)."""
        with self.lock:
            if not self.cancelled:
                self.cancel_locked()

    def touch(self) -> None:
        """Note that the client accepted data (the handler sent a message)."""
        self.progress_at = time.monotonic()

    def results(self) -> Iterator[tuple[int, object]]:
        """Yield (index, Capture) in input order, each as soon as it and all before it are ready;
        an example run in layer groups as (index, CapturePart) per group, in order.

        An item's bytes stay counted until the next one is asked for (it is
        being sent until then).

        Raises:
          JobCancelled: the job was cancelled while waiting.
          EngineFailed: the engine failed on this job's batch.
          SlowReader: the batcher gave up on this job's client.
        """
        sending, index = 0, 0
        try:
            while index < len(self.tokenized):
                with self.lock:
                    self._sent(sending)
                    sending = 0
                    self.waiting = True
                    if not self._items.get(index):
                        self.notify_worker()  # starved: a preemption may be due (grouped_runs)
                    while not self._items.get(index) and self.error is None and not self.cancelled:
                        self.ready.wait()
                    self.waiting = False
                    self.progress_at = time.monotonic()  # its stall clock starts now
                    if self.error is not None:
                        raise self.error
                    if self.cancelled:
                        raise JobCancelled()
                    cap, sending = self._items[index].popleft()
                    at = index
                    if ends_example(cap):  # a Capture, or an example's last part
                        del self._items[index]
                        index += 1
                    self._next = index
                    if not (self._computed() and self.stall_seen(self)):
                        self.notify_worker()  # no longer waiting: its stall clock runs
                yield at, cap
        finally:
            with self.lock:
                self._sent(sending)

    def peek(self) -> object | None:
        """The item (Capture or CapturePart) `results` yields next where it is ready now,
        else None: the sender begins compressing it while it sends the one before (its
        bytes stay counted in the buffer, as `results` counts them: until the item after
        it is asked for)."""
        with self.lock:
            items = self._items.get(self._next)
            return items[0][0] if items else None

    def next_ready(self) -> bool:
        """Whether `results` would yield its next example now, without waiting
        (a coalescing sender packs on into it only then)."""
        with self.lock:
            return bool(self._items.get(self._next))

    def _sent(self, size: int) -> None:
        """An example was sent: its bytes leave the buffer (lock held). The worker is
        told only while the job has examples to compute: then its buffer may be what
        holds them back (`MicroBatcher._fits`, `GroupedRuns.holds`); once every example
        is in, a smaller buffer only puts its stall off (and waking the worker for
        nothing costs the sender the interpreter lock at each example)."""
        self.progress_at = time.monotonic()
        if size:
            self.buffered -= size
            if not self._computed():
                self.notify_worker()

    def _computed(self) -> bool:
        """(lock held) Every example of the job is in (put whole); a job generating
        never is until it ends (its `tokenized` is a worst case)."""
        return self.generation is None and self._ended >= len(self.tokenized)
