"""Large host copies on several threads (jaxattn/capture/bulk.py): equal to the source bit
for bit (compared as raw bytes, NaN payloads included) for every dtype a capture holds,
odd shapes, strided sources and destinations, sizes below, at and past the pool's bound
and none; past the bound the pool's threads copy pieces (seen by the threads' names,
with the bound and pieces made small), below it the caller alone; refused, by name,
where shapes or dtypes differ; the pool made anew in a forked child. Numpy only."""

from __future__ import annotations

import concurrent.futures
import os
import threading

import ml_dtypes
import numpy as np
import pytest

from jaxattn import cpus
from jaxattn.capture import bulk
from jaxattn.errors import UsageError

DTYPES = (np.float32, np.float16, ml_dtypes.bfloat16, np.uint8, np.int32)


def random_bits(shape, dtype, seed=0) -> np.ndarray:
    """An array of `dtype` whose bytes are random: NaNs with payloads, infinities, subnormals."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


# The module's own bound and pieces (copy_threads makes them small).
REAL = {name: getattr(bulk, name) for name in ("POOL_MIN", "PIECE_BYTES", "ALIGN")}


def pooled(threads: list[str]) -> bool:
    return any(t.startswith("jaxattn-copy") for t in threads)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(7, 3, 129, 131), (1, 1, 5003), (2, 1, 1, 4099), (40961,)])
def test_copies_equal_the_source_bit_for_bit(copy_threads, dtype, shape):
    src = random_bits(shape, dtype)
    out = bulk.copied(src)
    assert same_bits(out, src)
    assert out.flags.c_contiguous and out.flags.writeable and not np.shares_memory(out, src)
    assert pooled(copy_threads)  # the pool's threads copied some pieces


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_strided_sources_and_destinations_copy_bit_for_bit(copy_threads, dtype):
    block = random_bits((3, 4, 70, 90), dtype, seed=1)
    src = block[:, ::-1, 3:67, 5:85]  # a trimmed row: neither contiguous nor in order
    dst_block = np.zeros((3, 6, 66, 81), dtype)
    dst = dst_block[:, 1:5, :64, 1:]
    bulk.copy_into(dst, src)
    assert same_bits(dst.copy(), src.copy())
    untouched = np.ones(dst_block.shape, bool)
    untouched[:, 1:5, :64, 1:] = False
    assert not dst_block.view(f"u{dst_block.itemsize}")[untouched].any()  # left as it was
    assert pooled(copy_threads)


@pytest.mark.parametrize(
    "nbytes,pooled_",
    [(bulk.POOL_MIN - 4, False), (bulk.POOL_MIN, True), (bulk.POOL_MIN + 4, True)],
    ids=["below", "at", "above"],
)
def test_the_pool_copies_from_its_bound_on(copy_threads, monkeypatch, nbytes, pooled_):
    """The module's bound (32 MiB) and pieces: the caller alone below it, in one plain
    copy; every piece once, the pool's threads copying some, from it on."""
    for name, value in REAL.items():
        monkeypatch.setattr(bulk, name, value)
    src = random_bits((nbytes // 4,), np.float32, seed=2)
    out = bulk.copied(src)
    assert same_bits(out, src)
    if pooled_:
        assert len(copy_threads) >= bulk.POOL_MIN // bulk.PIECE_BYTES
        assert pooled(copy_threads)
    else:
        assert copy_threads == []


def test_flat_pieces_cover_the_array_once_and_start_on_aligned_addresses(copy_threads):
    dst = np.empty(10_001, np.float32)[1:]  # most likely not aligned to ALIGN
    src = random_bits(dst.shape, np.float32, seed=3)
    pieces = bulk._pieces(dst, src)
    starts = [d.ctypes.data for d, _ in pieces]
    assert sum(d.size for d, _ in pieces) == dst.size
    assert starts[0] == dst.ctypes.data
    assert all(s % bulk.ALIGN == 0 for s in starts[1:])
    ends = [*starts[1:], dst.ctypes.data + dst.nbytes]  # each piece ends where the next starts
    assert all(d.ctypes.data + d.nbytes == e for (d, _), e in zip(pieces, ends, strict=True))
    assert max(d.nbytes for d, _ in pieces) <= bulk.PIECE_BYTES


def test_leading_axis_pieces_cut_the_next_axis_when_the_first_is_short(copy_threads):
    """A layer group of one layer ([1, H, T, T]): cut on its heads and rows, not one piece."""
    src = random_bits((1, 2, 64, 40), np.float32, seed=4)[..., :33]
    dst = np.empty(src.shape, src.dtype)
    pieces = bulk._pieces(dst, src)
    assert len(pieces) >= dst.nbytes // bulk.PIECE_BYTES
    assert sum(d.size for d, _ in pieces) == dst.size
    bulk.copy_into(dst, src)
    assert same_bits(dst, src.copy())


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(0,), (3, 0, 5), ()])
def test_empty_and_scalar_arrays_copy(copy_threads, dtype, shape):
    src = random_bits(shape, dtype, seed=5)
    out = bulk.copied(src)
    assert same_bits(out, src)


def test_overlapping_arrays_copy_as_numpy_copies_them(copy_threads):
    block = random_bits((40_000,), np.int32, seed=8)
    want = block[:-1000].copy()
    bulk.copy_into(block[1000:], block[:-1000])  # every piece's source another's destination
    assert same_bits(block[1000:], want)
    assert not pooled(copy_threads) and copy_threads == []


def test_other_dtypes_copy_as_they_are():
    src = np.array([[1 + 2j, np.nan], [3, 4]], np.complex128)  # 16-byte items
    assert same_bits(bulk.copied(src), src)
    objs = np.array([None, "a", 3], object)
    assert list(bulk.copied(objs)) == [None, "a", 3]


def test_mismatched_copies_are_refused_by_name(copy_threads):
    a = np.zeros((2, 3), np.float32)
    with pytest.raises(UsageError, match=r"shape \(3, 2\) into one of shape \(2, 3\)"):
        bulk.copy_into(a, np.zeros((3, 2), np.float32))
    with pytest.raises(UsageError, match="float16 into float32 bit for bit"):
        bulk.copy_into(a, np.zeros((2, 3), np.float16))
    for shape in ((2, 3), (50, 100)):  # one plain copy, and on the pool
        a = np.zeros(shape, np.float32)
        a.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            bulk.copy_into(a, np.ones(shape, np.float32))
        assert not a.any()


def test_the_pool_has_a_thread_a_core_less_the_callers_at_most_eight_in_all():
    assert [bulk.helpers(c) for c in (1, 2, 3, 8, 9, 64)] == [0, 1, 2, 7, 7, 7]


def test_the_pool_is_sized_by_the_cpus_the_process_may_use(monkeypatch):
    monkeypatch.setattr(cpus, "usable", lambda: 3)  # a container's quota (tests/test_cpus.py)
    assert bulk.helpers() == 2


def test_on_one_core_there_is_no_pool(monkeypatch):
    monkeypatch.setattr(bulk, "_pool", None)
    monkeypatch.setattr(bulk, "_pool_threads", 0)
    monkeypatch.setattr(cpus, "usable", lambda: 1)
    monkeypatch.setattr(bulk, "POOL_MIN", 1 << 10)
    assert bulk.pool() == (None, 0)
    src = random_bits((5000,), np.float32, seed=6)
    assert same_bits(bulk.copied(src), src)
    assert bulk._pool is None


def test_a_busy_pool_does_not_hold_the_caller(copy_threads):
    """Pool threads still busy with other work: the caller copies every piece itself and
    does not wait for them (what it queued is cancelled)."""
    gate = threading.Event()
    blockers = [bulk._pool.submit(gate.wait) for _ in range(3)]
    release = threading.Timer(30, gate.set)  # a caller that waits is let go, to fail
    release.start()
    src = random_bits((20_000,), np.float32, seed=7)
    out = bulk.copied(src)
    waited = gate.is_set()
    gate.set()
    release.cancel()
    assert not waited
    for b in blockers:
        b.result()
    assert same_bits(out, src)
    assert copy_threads and all(t == threading.current_thread().name for t in copy_threads)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_makes_a_pool_of_its_own(monkeypatch):
    monkeypatch.setattr(cpus, "usable", lambda: 2)
    parent, _ = bulk.pool()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's threads are not here
        ok = bulk._pool is None
        child, threads = bulk.pool()
        ok = ok and child is not parent and threads == 1
        bulk.POOL_MIN = 1 << 10
        src = np.arange(100_000, dtype=np.int32)
        ok = ok and bulk.copied(src).tobytes() == src.tobytes()
        os.write(w, b"1" if ok else b"0")
        os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.close(r)
    os.waitpid(pid, 0)
    assert got == b"1"


@pytest.mark.parametrize("seed", range(3))
def test_callers_on_several_threads_at_once_copy_bit_for_bit(copy_threads, seed):
    """Four threads copying at once through the one pool: sources reversed on every axis,
    destinations a slice of a C array (the Assembler's case) in either byte order."""

    def one(k):
        rng = np.random.default_rng((seed, k))
        for _ in range(5):
            shape = tuple(int(x) for x in rng.integers(1, 40, size=rng.integers(1, 5)))
            order = ">i8" if k % 2 else "<i8"
            size = tuple(s + 3 for s in shape)
            block = rng.integers(0, 2**31, size=size, dtype=np.int64).astype(order)
            sl = tuple(slice(2, 1, -1) if s == 1 else slice(s + 1, 0, -1) for s in shape)
            src = block[sl][tuple(slice(0, s) for s in shape)]
            assert all(st < 0 for st in src.strides)
            dst_full = np.zeros((3, *shape), order)
            dst = dst_full[1]
            bulk.copy_into(dst, src)
            assert (dst == src).all()
            assert not dst_full[0].any() and not dst_full[2].any()

    with concurrent.futures.ThreadPoolExecutor(4) as callers:
        list(callers.map(one, range(4)))  # each caller's error raised here
    assert pooled(copy_threads)
