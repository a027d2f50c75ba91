"""Large host copies on several cores (issues 30/31).

A whole result copied into fresh memory (an example's layer groups assembled,
`jaxattn.capture.part.Assembler`; results copied out of XLA's pinned pool,
`jaxattn.engine.host.copied`) runs at what one thread can fault in: the kernel
zeroes each fresh page in the thread that first touches it, so a 1 GiB copy into
a fresh array ran at 3.3 GB/s on the 2-core machine, into memory already touched
at 10.6 (BENCHMARKS.md). Here an array of `POOL_MIN` bytes or more is copied in pieces
of about `PIECE_BYTES` by the calling thread and a process-wide pool of helper
threads together (`helpers`: one thread a usable CPU less the caller's, at most
`MAX_THREADS` with the caller; `jaxattn.cpus.usable`: a container's CPU quota
counted), which fault and fill their pieces side by side; below it, one plain copy
(such an array often lands in pages already touched, and the hand-off would cost
more than it saves).

Each piece is copied as unsigned integers of the dtype's width, never through the
dtype itself: bit for bit whatever the values (NaN payloads, ml_dtypes' bfloat16),
and numpy releases the GIL while it copies them, so the threads copy at once (it
did for float32, float16, bfloat16, uint8 and int32 copied as they are too,
contiguous and strided, numpy 2.4, ml_dtypes 0.6: a Python loop ran on beside them).

Numpy and the standard library only, as `jaxattn.capture`.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import math
import os
import threading

import numpy as np

from jaxattn import cpus
from jaxattn.errors import UsageError

# Below this many bytes an array is copied in one go by the calling thread. From 32 MiB
# on glibc's malloc always maps fresh pages (its mmap threshold grows to at most that),
# which the first touch must fault in; a smaller array often reuses pages already
# touched, copied at ~11 GB/s by one thread on the 2-core machine (BENCHMARKS.md).
POOL_MIN = 32 << 20
# About this many bytes a piece: two of THP's 2 MiB pages, ~1 ms of copying into fresh
# memory, against a few us to take the next piece; `POOL_MIN` is 8 pieces, enough for
# `MAX_THREADS` threads.
PIECE_BYTES = 4 << 20
# Flat pieces start at multiples of this in the destination's address space, so that
# no 2 MiB huge page is faulted in by two threads at once.
ALIGN = 2 << 20
# The most threads one copy runs on, the caller's included: memory bandwidth, not
# cores, bounds a copy past a few, and the host has other work (gRPC, dispatch).
MAX_THREADS = 8
# The unsigned integer dtype of each itemsize a piece is copied as.
_PLAIN = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def helpers(cores: int | None = None) -> int:
    """Threads of the pool: one a usable CPU (`jaxattn.cpus.usable`) less the caller's
    (which copies too), the two together at most `MAX_THREADS`; 0 on one CPU (no pool)."""
    cores = cpus.usable() if cores is None else cores
    return max(0, min(MAX_THREADS, cores) - 1)


_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_threads = 0
_pool_lock = threading.Lock()


def _forget() -> None:
    """In a forked child: the parent's threads are not there; make a pool of its own."""
    global _pool, _pool_threads, _pool_lock
    _pool, _pool_threads, _pool_lock = None, 0, threading.Lock()


os.register_at_fork(after_in_child=_forget)


def pool() -> tuple[concurrent.futures.ThreadPoolExecutor | None, int]:
    """(the process's pool of copy threads, its threads), made on first use; (None, 0)
    on one usable CPU."""
    if _pool is not None:
        return _pool, _pool_threads
    with _pool_lock:
        if _pool is None:
            n = helpers()
            if n == 0:
                return None, 0
            _set_pool(
                concurrent.futures.ThreadPoolExecutor(n, thread_name_prefix="jaxattn-copy"), n
            )
        return _pool, _pool_threads


def _set_pool(executor, threads: int) -> None:
    global _pool, _pool_threads
    _pool, _pool_threads = executor, threads


def copied(src: np.ndarray) -> np.ndarray:
    """A C-order copy of `src` in memory of its own (writable), bit for bit (`copy_into`)."""
    src = np.asarray(src)
    out = np.empty(src.shape, src.dtype)
    copy_into(out, src)
    return out


def copy_into(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[...] = src, bit for bit, on several threads from `POOL_MIN` bytes on (see the module).
    Either may be non-contiguous (a view's strides).

    Raises:
      UsageError: shapes or dtypes that differ; ValueError: a read-only `dst` (numpy's).
    """
    if dst.shape != src.shape:
        raise UsageError(f"cannot copy an array of shape {src.shape} into one of shape {dst.shape}")
    if dst.dtype != src.dtype:
        raise UsageError(f"cannot copy {src.dtype} into {dst.dtype} bit for bit: the dtypes differ")
    plain = _PLAIN.get(dst.dtype.itemsize)
    if plain is None or dst.dtype.hasobject or dst.size == 0:  # no integer view: as it is
        np.copyto(dst, src, casting="no")
        return
    if dst.ndim == 0:
        dst, src = dst.reshape(1), src.reshape(1)
    dst, src = dst.view(plain), src.view(plain)
    # Overlapping arrays are numpy's to copy (it buffers them), not pieces side by side.
    small = dst.nbytes < POOL_MIN or np.may_share_memory(dst, src)
    executor, threads = (None, 0) if small else pool()
    if executor is None:
        np.copyto(dst, src)
        return
    _run(executor, threads, _pieces(dst, src))


def _pieces(dst: np.ndarray, src: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(destination, source) views of about `PIECE_BYTES` each, together the whole arrays."""
    if dst.flags.c_contiguous and src.flags.c_contiguous:  # flat, cut on huge pages
        d, s = dst.reshape(-1), src.reshape(-1)
        item = d.itemsize
        step = max(1, PIECE_BYTES // ALIGN) * ALIGN // item
        first = ((-d.ctypes.data) % ALIGN) // item  # items to the first aligned address
        cuts = [0, *range(first or step, d.size, step), d.size]
        return [(d[a:b], s[a:b]) for a, b in itertools.pairwise(cuts) if b > a]
    # Along the leading axes: the fewest whose entries make enough pieces; the last of
    # them cut into ranges, every entry of those before it a piece of its own.
    want = math.ceil(dst.nbytes / PIECE_BYTES)
    k, outer = 0, 1
    while k < dst.ndim - 1 and outer * dst.shape[k] < want:
        outer *= dst.shape[k]
        k += 1
    n = dst.shape[k]
    per = max(1, math.ceil(n / math.ceil(want / outer)))
    out = []
    for index in np.ndindex(*dst.shape[:k]):
        for a in range(0, n, per):
            key = (*index, slice(a, min(n, a + per)))
            out.append((dst[key], src[key]))
    return out


def _run(executor, threads: int, pieces: list) -> None:
    """Copy `pieces`, taken in turn by the calling thread and up to `threads` of the pool."""
    todo = iter(pieces)  # next() on a list's iterator is atomic: each piece taken once
    futures = []
    for _ in range(min(threads, len(pieces) - 1)):
        try:
            futures.append(executor.submit(_drain, todo))
        except RuntimeError:  # the interpreter is shutting down: the caller copies it all
            break
    try:
        _drain(todo)
    finally:
        for f in futures:  # those the pool has not begun (its threads busy) have nothing left
            if not f.cancel():
                f.result()


def _drain(todo) -> int:
    """Copy pieces until none is left; how many this thread copied."""
    n = 0
    for d, s in todo:
        np.copyto(d, s)
        n += 1
    return n
