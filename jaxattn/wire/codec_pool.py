"""A stream's chunks (de)compressed on several cores, in order, in bounded memory.

zstd and lz4 release the GIL while they compress and decompress, but one call's
chunks were compressed one after the other in its encode thread, and decoded
one after the other in the client's reading thread: a server answering a few
large compressed requests used a core or two for the codec however many it had
(the first GPU run measured uint8 + zstd attention at 293 texts/s through the
service, 0.69 GB/s: what one core compresses), and one client reading them
decodes no faster than one core. One shared pool of threads serves both sides:

- the server (`Stream`): the next pieces of a stream are compressed while the
  stream's consumer frames and sends the earlier ones; results come back in order.
- the client (`start`): each chunk is decoded as it is read, into the tensor it
  belongs to, while the reader goes on to the next message; the receiver waits
  for an example's chunks only when the example is complete (`wire.receive`),
  and decodes there those the pool has not begun yet.

Memory stays bounded across all calls: work goes to the pool only when one of
the process's `slots` is free (twice the pool's threads), and its slot is returned
when the stream takes the result (`Stream.take`) or when it is done (`start`);
otherwise it is done where it is asked for, as before the pool. Small work (a
piece under `POOL_MIN` bytes, a chunk decoding to less than `DECODE_MIN`) is
always done there: the hand-off would cost more than the codec.
"""

from __future__ import annotations

import collections
import concurrent.futures
import ctypes
import itertools
import logging
import os
import queue
import threading
from collections.abc import Callable, Iterable
from typing import TypeVar

from jaxattn.cpus import usable as usable_cpus
from jaxattn.errors import UsageError

T = TypeVar("T")
R = TypeVar("R")

_log = logging.getLogger(__name__)

# Below this a piece is compressed in the stream's own thread.
POOL_MIN = 128 << 10
# Below this many decoded bytes a chunk is decompressed in the reading thread: a
# hand-off to the pool costs the reader ~15-20 us (submit, then the result), zstd
# decodes 128 KiB of uint8 attention in ~95 us, 64 KiB in ~50 (the 2-core machine).
DECODE_MIN = 128 << 10
# A compressed stream cuts its tensors into pieces of at most this (or the request's
# max_chunk_bytes, where smaller), so that one tensor's pieces compress side by side:
# a 2.4 MB uint8 attention map of BERT-base at 128 tokens is five. zstd level 1 on
# 512 KiB frames: 0.3 % more bytes than on 4 MiB ones for uint8 attention, 0.03 % for
# a float32 full capture (all-MiniLM-L6-v2, EWT; 256 KiB: 2.7 %).
PIECE_BYTES = 512 << 10


# Sets the pool's threads (a whole number, 1 to MAX_THREADS); unset: `workers`' default.
THREADS_ENV = "JAXATTN_CODEC_THREADS"
MAX_THREADS = 256


def workers(cpus: int | None = None) -> int:
    """Threads of the shared pool: $JAXATTN_CODEC_THREADS where set, else one a CPU the
    process may use (`jaxattn.cpus.usable`: a container's CPU quota counted), at most 8
    (the host's other work: gRPC, the engine's dispatch, the clients on a shared machine).

    Raises:
      UsageError: $JAXATTN_CODEC_THREADS is not a whole number from 1 to MAX_THREADS.
    """
    value = os.environ.get(THREADS_ENV, "").strip()
    if value:
        try:
            n = int(value)
        except ValueError:
            n = 0
        if not 1 <= n <= MAX_THREADS:
            raise UsageError(
                f"{THREADS_ENV}={value!r}: the codec pool's threads must be a whole number "
                f"from 1 to {MAX_THREADS}"
            )
        return n
    return max(1, min(8, cpus or usable_cpus()))


# The codec threads' name, in Python and for the system (/proc/PID/task/TID/comm, top -H),
# so that a process's CPU can be split by thread (benchmarks/gpu_checks.py service).
THREAD_NAME = "jaxattn-codec"


def name_os_thread(name: str) -> None:
    """Give the calling thread `name` (its first 15 bytes) for the system too, where it
    can (Linux's prctl(PR_SET_NAME)); elsewhere nothing (Python's own name is not the
    system's before 3.14)."""
    global _prctl
    if _prctl is None:
        try:
            _prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):  # no prctl (not Linux)
            _prctl = False
    if _prctl:
        _prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)


_PR_SET_NAME = 15
_prctl = None


class _Pool:
    """The process's codec threads and the slots that bound what they hold."""

    def __init__(self, threads: int):
        self.executor = _Threads(threads)
        self.slots = _Slots(2 * threads)
        self.threads = threads


# A _Task's states: queued, begun on a thread, finished (result or exception), dropped.
_QUEUED, _RUNNING, _DONE, _CANCELLED = range(4)


class _Task:
    """Work given to the pool, a lighter concurrent.futures.Future: its state changes on
    the pool's one C lock, its finish is told by a C lock held until then (a waiter woken
    only where one waits; a Future takes a Condition and its RLock, a few Python
    lock operations a piece, and a ThreadPoolExecutor a Semaphore's besides)."""

    __slots__ = ("_work", "_args", "_state", "_value", "_error", "_finished", "_then", "_lock")

    def __init__(self, lock: threading.Lock, work: Callable[..., R], args: tuple):
        self._work, self._args, self._lock = work, args, lock
        self._state, self._value, self._error, self._then = _QUEUED, None, None, None
        self._finished = threading.Lock()
        self._finished.acquire()  # released once the work is done

    def _run(self) -> None:
        """(a pool thread) The work done, unless it was cancelled first."""
        with self._lock:
            if self._state != _QUEUED:
                return
            self._state = _RUNNING
        try:
            self._value = self._work(*self._args)
        except BaseException as e:  # noqa: BLE001 - raised by result(), as a Future's
            self._error = e
        self._work, self._args = None, ()
        with self._lock:
            self._state, then = _DONE, self._then
        self._finished.release()
        # An error's traceback holds this frame: its `self` let go, else the task and
        # what its work's frame held (a chunk's data) live on in a cycle until a gc.
        self = None
        if then is not None:
            then()

    def cancel(self) -> bool:
        """Drop the work if no thread has begun it (its `then` called); whether it is dropped."""
        with self._lock:
            if self._state == _QUEUED:
                self._state, then = _CANCELLED, self._then
                self._work, self._args = None, ()
            else:
                return self._state == _CANCELLED
        self._finished.release()  # one waiting for it raises CancelledError
        if then is not None:
            then()
        return True

    def then(self, call: Callable[[], object]) -> None:
        """call() once the work is done or dropped: now where it is already (one call a task)."""
        with self._lock:
            if self._state < _DONE:
                self._then = call
                return
        call()

    def result(self):
        """The work's result, its exception raised; waits for it to be done.

        Raises:
          concurrent.futures.CancelledError: the work was dropped.
        """
        if self._state < _DONE:
            with self._finished:  # released by the thread that ran it
                pass
        if self._state == _CANCELLED:
            raise concurrent.futures.CancelledError()
        if self._error is not None:
            try:
                raise self._error
            finally:
                self = None  # its traceback holds this frame: no cycle through the task
        return self._value

    def done(self) -> bool:
        return self._state >= _DONE

    def cancelled(self) -> bool:
        return self._state == _CANCELLED


class _Threads:
    """The pool's threads, each taking the next `_Task` from one C queue (a thread that is
    waiting woken by `submit`; one that is busy takes the next when done, unwoken)."""

    def __init__(self, threads: int):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()  # the tasks' states
        self._n, self._threads, self._shutdown, self._atexit = threads, [], False, False
        self._pid = os.getpid()  # a forked child's copy stops nothing (`_stop`)

    def submit(self, work: Callable[..., R], *args) -> _Task:
        """work(*args) queued for the pool's threads (started on first use).

        Raises:
          RuntimeError: the pool is shut down, or the interpreter is shutting down.
        """
        if len(self._threads) < self._n:
            self._start()
        task = _Task(self._lock, work, args)
        with self._lock:  # not behind the threads' stop
            if self._shutdown:
                raise RuntimeError("the codec pool is shut down")
            self._queue.put(task)
        return task

    def _start(self) -> None:
        with self._lock:
            if self._shutdown:  # shut down before its first work: no threads (submit raises)
                return
            if not self._atexit:  # at the interpreter's exit: the queued work done, then
                threading._register_atexit(self._stop)  # stop (as a ThreadPoolExecutor);
                self._atexit = True  # once, though no thread could start (one more a piece)
            while len(self._threads) < self._n:
                thread = threading.Thread(
                    target=self._serve, name=f"{THREAD_NAME}_{len(self._threads)}"
                )
                thread.start()  # RuntimeError at interpreter shutdown
                self._threads.append(thread)

    def _serve(self) -> None:
        name_os_thread(THREAD_NAME)
        get = self._queue.get
        while (task := get()) is not None:
            try:
                task._run()
            except Exception:  # a bug in a task's `then`: said, and the thread goes on
                _log.exception("a codec pool task's callback failed")
            del task  # what it held let go before the next wait

    def _stop(self) -> None:
        """No more work taken; each thread stops once the work queued before is done.
        Nothing in a forked child (at its exit): the parent's threads are not there, and
        its copy of the lock may be held for good (copied while one of them held it)."""
        if os.getpid() != self._pid:
            return
        with self._lock:
            self._shutdown = True
            for _ in self._threads:
                self._queue.put(None)

    def shutdown(self) -> None:
        """Stop the threads once the queued work is done, and wait for them."""
        self._stop()
        for thread in self._threads:
            thread.join()


class _Slots:
    """A bounded count of free slots, taken without waiting (`take`) and given back
    (`give_back`), on one C lock (threading.BoundedSemaphore's are Python code around a
    Condition: a few microseconds of the reading thread's GIL a chunk)."""

    def __init__(self, n: int):
        self._free, self._n, self._lock = n, n, threading.Lock()

    def take(self) -> bool:
        """Take a slot where one is free; whether it was (never waits)."""
        with self._lock:
            if self._free:
                self._free -= 1
                return True
            return False

    def give_back(self) -> None:
        with self._lock:
            if self._free >= self._n:  # a bug: each slot is given back once, by its taker
                raise RuntimeError("a codec pool slot given back more times than it was taken")
            self._free += 1


_pool: _Pool | None = None
_pool_lock = threading.Lock()


def _forget() -> None:
    """In a forked child: the parent's threads are not there; make a pool of its own."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget)


def pool() -> _Pool:
    """The shared pool, made on first use."""
    global _pool
    shared = _pool  # made once: the lock only for the first use (each chunk asks)
    if shared is not None:
        return shared
    with _pool_lock:
        if _pool is None:
            _pool = _Pool(workers())
        return _pool


class Stream:
    """A stream's work on items that become known as it goes: (item, work(item))
    taken in order (`take`), up to `ahead` items begun ahead on the shared pool, those
    without a free slot offered again as slots free up (but the next to be taken: done
    where it is taken, not queued behind the pool's work). When
    fewer than `ahead` wait, `more()` is asked for the next items (none: nothing more
    now; it is asked again at the next `take`): a sender gives there the pieces of the
    example it sends next where that example is ready, so they compress while the
    current one's are sent. A slot is held until its result is taken (the results
    held stay bounded); `close` drops what was begun (slots returned once each finishes).
    """

    def __init__(
        self,
        work: Callable[[T], R],
        size: Callable[[T], int],
        ahead: int | None = None,
        more: Callable[[], Iterable[T]] = lambda: (),
    ):
        self._shared = pool()
        self._work, self._size, self._more = work, size, more
        self._ahead = self._shared.threads if ahead is None else ahead
        self._pending: collections.deque = collections.deque()  # [item, _Task or None]
        self._known: collections.deque = collections.deque()  # from `more`, not pending yet
        self._unoffered = 0  # pending pool-sized items without a slot yet

    def _fill(self) -> None:
        pending, shared = self._pending, self._shared
        if self._unoffered:  # slots freed since: offer the waiting items (in order) again
            for entry in itertools.islice(pending, 1, None):
                if entry[1] is None and self._size(entry[0]) >= POOL_MIN:
                    entry[1] = _offer(shared, self._work, entry[0])
                    if entry[1] is None:
                        break
                    self._unoffered -= 1
        while len(pending) < self._ahead + 1:
            if not self._known:
                self._known.extend(self._more())
                if not self._known:
                    return
            item = self._known.popleft()
            task = None
            if self._size(item) >= POOL_MIN:
                task = _offer(shared, self._work, item) if not self._unoffered else None
                self._unoffered += task is None
            pending.append([item, task])

    def take(self) -> tuple[T, R] | None:
        """(item, work(item)) of the next item in order, its exception raised here; None
        where no item is known (`more` gave none)."""
        self._fill()
        if not self._pending:
            return None
        item, task = self._pending.popleft()
        if task is None:
            if self._size(item) >= POOL_MIN:
                self._unoffered -= 1
            result = self._work(item)
        else:
            try:
                result = task.result()
            finally:
                self._shared.slots.give_back()
        self._fill()
        return item, result

    def close(self) -> None:
        """Drop what was begun ahead: cancelled where the pool has not begun it, its slot
        returned once it finishes where it has."""
        give_back = self._shared.slots.give_back
        for _, task in self._pending:
            if task is not None:
                task.cancel()
                task.then(give_back)  # now where dropped (or finished), else once finished
        self._pending.clear()
        self._known.clear()
        self._unoffered = 0


def start(work: Callable[..., R], *args, size: int, least: int) -> Job:
    """work(*args) begun on the shared pool where `size` is at least `least` and a slot
    is free (the slot returned as soon as the work is done, or dropped before it
    began), else done here and now; either way a `Job` whose `result` the caller
    takes (or whose exception it raises) when it needs it."""
    if size >= least:
        shared = pool()
        task = _offer(shared, work, *args)
        if task is not None:
            task.then(shared.slots.give_back)
            return Job(task, work, args)
    return _done(work, args)


class Job:
    """Work given to `start`: queued or running on the pool (a `_Task`), or done here
    (its result kept, no task: one object fewer a chunk for the reading thread)."""

    __slots__ = ("_task", "_work", "_args", "_value", "_error")

    def __init__(self, task: _Task | None, work=None, args: tuple = ()):
        self._task, self._work, self._args = task, work, args
        self._value = self._error = None

    def result(self):
        """The work's result, its exception raised. Work the pool has not begun yet is
        done here, now (its slot returned): the caller would only wait for it."""
        task = self._task
        if self._work is not None and task is not None and task.cancel():
            self._task = task = None
            self._value, self._error = _here(self._work, self._args)
        self._work, self._args = None, ()  # what it held (a chunk's data) let go
        if task is not None:
            return task.result()
        if self._error is not None:
            raise self._error
        return self._value

    def cancel(self) -> bool:
        """Drop the work if the pool has not begun it (its slot returned); whether it was."""
        self._work, self._args = None, ()
        return self._task is not None and self._task.cancel()

    def done(self) -> bool:
        return self._task is None or self._task.done()

    def cancelled(self) -> bool:
        return self._task is not None and self._task.cancelled()


def _done(work: Callable[..., R], args: tuple) -> Job:
    """A Job of work(*args) done in this thread."""
    job = Job(None)
    job._value, job._error = _here(work, args)
    return job


def _here(work: Callable[..., R], args: tuple) -> tuple:
    """work(*args) done in this thread: (its result, None) or (None, its exception)."""
    try:
        return work(*args), None
    except Exception as e:  # noqa: BLE001 - the caller's to raise, as from the pool
        return None, e


def _offer(shared: _Pool, work: Callable[..., R], *args) -> _Task | None:
    """work(*args) submitted to the pool, holding one of its slots; None where no slot is free."""
    if not shared.slots.take():
        return None
    try:
        return shared.executor.submit(work, *args)
    except RuntimeError:  # the interpreter is shutting down: the caller's thread, then
        shared.slots.give_back()
        return None
