"""Chunks compressed on the shared pool: in order, the same bytes, and the pool's slots
(what bounds the memory held ahead across every call) always given back."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from codec_pool_support import free_slots_now, ordered, settle

from jaxattn.capture import Capture
from jaxattn.wire import StreamDecoder, codec_pool
from jaxattn.wire.codecs import compress
from jaxattn.wire.send import serialize_example

BIG = codec_pool.POOL_MIN


@pytest.fixture(autouse=True)
def _at_rest():
    """Each test starts with the pool idle: what an earlier one left is done."""
    settle()


def test_results_come_in_order_from_the_pool_threads():
    threads: list[str] = []

    def work(k):
        threads.append(threading.current_thread().name)
        return k * k

    free = free_slots_now()
    got = list(ordered(work, range(20), lambda k: BIG, ahead=3))
    assert got == [(k, k * k) for k in range(20)]
    assert any(name.startswith("jaxattn-codec") for name in threads)
    assert free_slots_now() == free


def test_small_items_and_items_past_the_free_slots_run_where_they_are_taken():
    pool = codec_pool.pool()
    here = threading.current_thread().name
    seen: dict[int, str] = {}

    def work(k):
        seen[k] = threading.current_thread().name
        return k

    list(ordered(work, range(6), lambda k: BIG - 1))  # all small
    assert set(seen.values()) == {here}
    seen.clear()
    held = 0
    while pool.slots.take():  # another call holds every slot
        held += 1
    try:
        assert [r for _, r in ordered(work, range(6), lambda k: BIG)] == [*range(6)]
        assert set(seen.values()) == {here}
    finally:
        for _ in range(held):
            pool.slots.give_back()


def test_an_error_comes_at_its_item_and_the_slots_come_back():
    def work(k):
        if k == 4:
            raise ValueError("piece 4 is broken")
        return k

    free = free_slots_now()
    results = ordered(work, range(10), lambda k: BIG, ahead=3)
    assert [next(results)[1] for _ in range(4)] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="piece 4 is broken"):
        next(results)
    settle()
    assert free_slots_now() == free


def test_a_stream_dropped_midway_gives_its_slots_back():
    gate = threading.Event()

    def work(k):
        gate.wait(5)
        return k

    free = free_slots_now()
    results = ordered(work, range(10), lambda k: BIG, ahead=4)
    gate.set()
    next(results)
    results.close()  # a cancelled call: what was computed ahead is dropped
    settle()
    assert free_slots_now() == free


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_a_many_chunk_example_is_the_same_stream_as_compressed_inline(codec):
    """With a codec, pieces are at most PIECE_BYTES (a request's smaller max_chunk_bytes
    wins), each one frame of the codec, decoded to the tensor."""
    rng = np.random.default_rng(0)
    t = 150  # attention 2 x 3 x 150 x 150 float32 = 540 KB: 3 chunks of 256 KiB and a rest
    att = rng.random((2, 3, t, t)).astype(np.float32)
    att = np.round(att * 8) / 8  # compressible
    cap = Capture(
        tokens=tuple(f"t{i}" for i in range(t)),
        sentence_b_start=None,
        layers=(0, 1),
        heads=(0, 1, 2),
        dtype="float32",
        tensors={"attention": att},
    )
    chunk = 256 << 10  # under PIECE_BYTES, over POOL_MIN: the request's size, pooled
    assert codec_pool.POOL_MIN <= chunk <= codec_pool.PIECE_BYTES
    messages = list(serialize_example(0, cap, codec=codec, max_chunk_bytes=chunk))
    assert len(messages) == 1 + 3  # the header, three chunks
    decoder = StreamDecoder()
    (got,) = [c for m in messages for c in decoder.feed_all(m)]
    np.testing.assert_array_equal(got.attention, att)
    # Each chunk is the codec's own frame of its piece, as compressing it inline gives.
    raw = att.tobytes()
    for k, message in enumerate(messages[1:]):
        piece = raw[k * chunk : (k + 1) * chunk]
        assert compress(piece, codec) in message


def test_a_compressed_tensor_comes_in_pieces_of_at_most_piece_bytes():
    t = 1000  # a 4 MB map: 8 pieces of 512 KiB at most
    cap = Capture(
        tokens=tuple(f"t{i}" for i in range(t)),
        sentence_b_start=None,
        layers=(0,),
        heads=(0,),
        dtype="float32",
        tensors={"attention": np.zeros((1, 1, t, t), np.float32)},
    )
    messages = list(serialize_example(0, cap, codec="zstd", max_chunk_bytes=4 << 20))
    assert len(messages) == 1 + -(-4_000_000 // codec_pool.PIECE_BYTES)
    decoder = StreamDecoder()
    (got,) = [c for m in messages for c in decoder.feed_all(m)]
    np.testing.assert_array_equal(got.attention, cap.attention)


def test_a_forked_child_compresses_on_a_pool_of_its_own():
    """In a process of its own (no JAX threads: forking those warns, and may hang on
    locks they hold): the parent's pool made, then a fork; the child's pool works."""
    import subprocess
    import sys

    script = """if True:
        import os, sys
        sys.path.insert(0, sys.argv[1])
        from codec_pool_support import ordered
        from jaxattn.wire import codec_pool as cp
        big = cp.POOL_MIN
        list(ordered(lambda k: k, range(3), lambda k: big))  # the parent's pool
        pid = os.fork()
        if pid == 0:  # the parent's threads are gone: without a pool of its own, a hang
            got = list(ordered(lambda k: k + 1, range(5), lambda k: big))
            os._exit(0 if got == [(k, k + 1) for k in range(5)] else 1)
        sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    """
    here = str(Path(__file__).parent)  # codec_pool_support
    done = subprocess.run([sys.executable, "-c", script, here], timeout=30, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]


def test_start_runs_large_work_on_the_pool_and_small_work_here():
    here = threading.current_thread().name
    started, go = threading.Event(), threading.Event()

    def work():
        started.set()
        go.wait(30)
        return threading.current_thread().name

    job = codec_pool.start(work, size=BIG, least=BIG)
    assert started.wait(30)  # begun while this thread waits: on one of the pool's
    go.set()
    assert job.result().startswith("jaxattn-codec")
    small = codec_pool.start(lambda: threading.current_thread().name, size=BIG - 1, least=BIG)
    assert small.done() and small.result() == here

    def broken():
        raise ValueError("chunk 3 is broken")

    for size in (BIG, 0):  # on the pool, and here: raised by result(), not by start()
        job = codec_pool.start(broken, size=size, least=BIG)
        with pytest.raises(ValueError, match="chunk 3 is broken"):
            job.result()


def test_a_job_the_pool_has_not_begun_is_done_by_the_one_waiting_for_it():
    """Every thread held: the next jobs wait in the queue, holding slots; result() runs
    one here (its slot back), cancel() drops another (its slot back too)."""
    shared = codec_pool.pool()
    gate, here = threading.Event(), threading.current_thread().name
    free = free_slots_now()
    held = [codec_pool.start(gate.wait, 30, size=BIG, least=0) for _ in range(shared.threads)]
    queued = [
        codec_pool.start(lambda: threading.current_thread().name, size=BIG, least=0)
        for _ in range(2)
    ]
    try:
        assert not any(j.done() for j in queued)
        assert queued[0].result() == here  # taken back from the queue
        assert queued[1].cancel() and queued[1].cancelled()
        assert free_slots_now() == free - shared.threads
    finally:
        gate.set()
    assert all(j.result() for j in held)
    settle()
    assert free_slots_now() == free


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names from /proc")
def test_the_codec_and_encode_threads_carry_their_names_for_the_system():
    """/proc/PID/task/TID/comm names them, so a process's CPU splits by thread."""
    from service.prefetch import THREAD_NAME, prefetch

    def comm() -> str:
        return Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip()

    on_the_pool = codec_pool.pool().executor.submit(comm).result()
    assert on_the_pool == codec_pool.THREAD_NAME == "jaxattn-codec"
    assert list(prefetch(comm() for _ in range(2))) == [THREAD_NAME] * 2
    assert THREAD_NAME == "jaxattn-encode"
    assert comm() != THREAD_NAME  # the caller's own name is left alone
