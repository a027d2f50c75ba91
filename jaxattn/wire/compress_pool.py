"""Compressing a stream's chunks on several cores, in order, in bounded memory.

zstd and lz4 release the GIL while they compress, but one call's chunks were
compressed one after the other in its encode thread: a server answering a few
large compressed requests used a core or two for the codec however many it had
(the first GPU run measured uint8 + zstd attention at 293 texts/s through the
service, 0.69 GB/s: what one core compresses). `ordered` compresses the next
pieces of a stream in a shared pool of threads while the stream's consumer
frames and sends the earlier ones, and hands the results back in order.

Memory stays bounded across all calls: a piece is compressed ahead only when
one of the process's `slots` is free (twice the pool's threads), and its slot is
returned when the stream takes the result (or drops it, closing); otherwise it
is compressed where it is taken, as before. A small piece (under `POOL_MIN`
bytes) is always compressed there: the hand-off would cost more than the codec.
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

# Below this a piece is compressed in the stream's own thread.
POOL_MIN = 128 << 10
# A compressed stream cuts its tensors into pieces of at most this (or the request's
# max_chunk_bytes, where smaller), so that one tensor's pieces compress side by side:
# a 2.4 MB uint8 attention map of BERT-base at 128 tokens is five. zstd level 1 on
# 512 KiB frames: 0.3 % more bytes than on 4 MiB ones for uint8 attention, 0.03 % for
# a float32 full capture (all-MiniLM-L6-v2, EWT; 256 KiB: 2.7 %).
PIECE_BYTES = 512 << 10


def workers(cpus: int | None = None) -> int:
    """Threads of the shared pool: one a core, at most 8 (the host's other work:
    gRPC, the engine's dispatch, the clients on a shared machine)."""
    return max(1, min(8, cpus or os.cpu_count() or 1))


class _Pool:
    """The process's compression threads and the slots that bound what they hold."""

    def __init__(self, threads: int):
        self.executor = concurrent.futures.ThreadPoolExecutor(
            threads, thread_name_prefix="jaxattn-compress"
        )
        self.slots = threading.BoundedSemaphore(2 * threads)
        self.threads = threads


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
    with _pool_lock:
        if _pool is None:
            _pool = _Pool(workers())
        return _pool


def ordered(
    work: Callable[[T], R], items: Iterable[T], size: Callable[[T], int], ahead: int | None = None
) -> Iterator[tuple[T, R]]:
    """(item, work(item)) for each item, in order, up to `ahead` (default: the pool's threads)
    computed ahead in the shared pool where a slot is free and `size(item)` is at
    least `POOL_MIN`; the others where they are taken. Closing the iterator drops
    what was computed ahead (its slots returned once each piece finishes).
    An exception raised by `work` is raised here, at its item.
    """
    shared = pool()
    ahead = shared.threads if ahead is None else ahead
    pending: collections.deque = collections.deque()  # (item, future or None)
    source = iter(items)

    def fill() -> None:
        while len(pending) < ahead + 1:
            item = next(source, _END)
            if item is _END:
                return
            future = None
            if size(item) >= POOL_MIN and shared.slots.acquire(blocking=False):
                try:
                    future = shared.executor.submit(work, item)
                except RuntimeError:  # the interpreter is shutting down: here, then
                    shared.slots.release()
            pending.append((item, future))

    try:
        fill()
        while pending:
            item, future = pending.popleft()
            if future is None:
                result = work(item)
            else:
                try:
                    result = future.result()
                finally:
                    shared.slots.release()
            fill()
            yield item, result
    finally:
        for _, future in pending:
            if future is not None and not future.cancel():
                future.add_done_callback(lambda _: shared.slots.release())
            elif future is not None:
                shared.slots.release()


_END = object()
