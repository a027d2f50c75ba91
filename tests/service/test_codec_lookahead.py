"""A stream's compressed pieces begun across its examples (`send.Compressor`), the job's
`peek` that says which example comes next, and the pool's size ($JAXATTN_CODEC_THREADS)."""

from __future__ import annotations

import dataclasses
import threading
import tracemalloc
import types
import zlib

import numpy as np
import pytest
from codec_pool_support import free_slots, settle

from jaxattn.capture import Capture
from jaxattn.errors import UsageError
from jaxattn.wire import StreamDecoder, codec_pool, send
from jaxattn.wire.codecs import compress
from service.admitted_call import Job
from service.servicer import _serialized

PIECE = codec_pool.POOL_MIN  # the request's max_chunk_bytes: every piece goes to the pool


def example(fill: int, pieces: int = 3) -> Capture:
    """A uint8 attention map of `pieces` pieces of PIECE bytes, every byte `fill` but a
    ramp in each piece (so no two pieces compress alike)."""
    t = 256  # 1 x heads x 256 x 256 uint8: 64 KiB a head, PIECE = 2 heads
    heads = pieces * PIECE // (t * t)
    att = np.full((1, heads, t, t), fill, np.uint8)
    att[0, :, 0, :] = np.arange(t, dtype=np.uint8)[None, :] ^ np.arange(heads)[:, None]
    return Capture(
        tokens=tuple(f"t{i}" for i in range(t)),
        sentence_b_start=None,
        layers=(0,),
        heads=tuple(range(heads)),
        dtype="uint8",
        tensors={"attention": att},
        quantization={"attention": (1 / 255, 0.0)},
    )


@pytest.fixture
def compressed(monkeypatch):
    """The fill byte of each piece compressed, in the order compression began."""
    seen: list[int] = []
    lock = threading.Lock()

    def counted(data, codec):
        with lock:
            seen.append(bytes(memoryview(data)[-1:])[0])
        return compress(data, codec)

    monkeypatch.setattr(send, "compress", counted)
    settle()
    return seen


@pytest.mark.parametrize("ready", [True, False])
def test_the_next_examples_pieces_compress_while_this_ones_are_taken(compressed, ready):
    first, second = example(1), example(2)
    peek = (lambda: second) if ready else (lambda: None)
    compressor = send.Compressor("zstd", PIECE, peek)
    free = free_slots()
    pieces = compressor.pieces(
        first,
    )
    next(pieces)
    next(pieces)  # two pieces of the first example taken; one of it still to come
    settle()
    # begun already: the first example's last piece, and (peek has it) the second's first
    assert compressed.count(1) == 3
    assert (2 in compressed) is ready
    assert len(list(pieces)) == 1
    assert [p[:3] for p in compressor.pieces(second)] == [
        ("attention", k * PIECE, (k + 1) * PIECE) for k in range(3)
    ]
    assert sorted(compressed) == [1, 1, 1, 2, 2, 2]  # each piece compressed once
    compressor.close()
    assert free_slots() == free


def test_a_stream_looked_ahead_is_the_same_stream():
    """Three examples through one compressor that looks ahead, as the server sends them:
    each chunk is its piece's own zstd frame, and the stream decodes to the maps."""
    caps = [example(k) for k in (1, 2, 3)]
    following = iter(caps[1:] + [None])
    nxt = [next(following)]

    def peek():
        return nxt[0]

    compressor = send.Compressor("zstd", PIECE, peek)
    messages = []
    for index, cap in enumerate(caps):
        messages += send.serialize_example(
            index, cap, codec="zstd", max_chunk_bytes=PIECE, compressor=compressor
        )
        nxt[0] = next(following, None)
    compressor.close()
    assert len(messages) == 3 * (1 + 3)  # a header and three chunks an example
    decoder = StreamDecoder()
    got = [c for m in messages for c in decoder.feed_all(m)]
    for g, cap in zip(got, caps, strict=True):
        np.testing.assert_array_equal(g.tensors["attention"], cap.tensors["attention"])
    for k, message in enumerate(m for i, m in enumerate(messages) if i % 4):
        raw = caps[k // 3].tensors["attention"].tobytes()
        piece = raw[(k % 3) * PIECE : (k % 3 + 1) * PIECE]
        assert compress(piece, "zstd") in message


def test_an_example_other_than_the_one_looked_ahead_to_is_begun_anew(compressed):
    first, second, other = example(1), example(2), example(3)
    compressor = send.Compressor("zstd", PIECE, lambda: second)
    free = free_slots()
    assert len(list(compressor.pieces(first))) == 3
    settle()
    assert 2 in compressed  # looked ahead to `second`
    got = list(compressor.pieces(other))  # but `other` came: `second`'s work is dropped
    assert [p[:3] for p in got] == [("attention", k * PIECE, (k + 1) * PIECE) for k in range(3)]
    assert compressed.count(3) == 3
    compressor.close()
    assert free_slots() == free


def test_a_stream_left_part_way_drops_what_it_began():
    first, second = example(1, pieces=4), example(2)
    compressor = send.Compressor("zstd", PIECE, lambda: second)
    free = free_slots()
    pieces = compressor.pieces(first)
    next(pieces)
    pieces.close()  # the call went: the compressor begins again with what comes next
    assert len(list(compressor.pieces(second))) == 3
    compressor.close()
    assert free_slots() == free


def test_a_compressor_of_other_settings_is_refused():
    compressor = send.Compressor("zstd", PIECE)
    with pytest.raises(RuntimeError, match="another codec or piece size"):
        list(
            send.serialize_example(
                0, example(1), codec="lz4", max_chunk_bytes=PIECE, compressor=compressor
            )
        )


def test_peek_is_the_item_results_yields_next_once_it_is_ready():
    job = Job(spec=None, tokenized=["a", "b", "c"], lock=threading.Lock())
    caps = ["cap0", "cap1", "cap2"]  # stand-ins: the job only hands them on
    with job.lock:
        job.put(0, caps[0])
        job.put(1, caps[1])
    assert job.peek() == "cap0"
    results = job.results()
    assert next(results) == (0, "cap0")
    assert job.peek() == "cap1"
    assert next(results) == (1, "cap1")
    assert job.peek() is None  # example 2 is not computed yet
    with job.lock:
        job.put(2, caps[2])
    assert job.peek() == "cap2"
    assert next(results) == (2, "cap2")
    assert job.peek() is None


@pytest.mark.parametrize(
    ("value", "threads"), [("", 8), ("3", 3), (" 16 ", 16), ("1", 1), ("256", 256)]
)
def test_the_pool_size_comes_from_the_environment(monkeypatch, value, threads):
    monkeypatch.setenv(codec_pool.THREADS_ENV, value)
    assert codec_pool.workers(cpus=32) == threads


def test_the_default_pool_is_a_thread_a_core_at_most_eight(monkeypatch):
    monkeypatch.delenv(codec_pool.THREADS_ENV, raising=False)
    assert [codec_pool.workers(cpus=n) for n in (1, 2, 8, 16)] == [1, 2, 8, 8]


@pytest.mark.parametrize("value", ["0", "-2", "257", "four", "2.5"])
def test_a_pool_size_that_is_not_a_number_of_threads_is_named(monkeypatch, value):
    monkeypatch.setenv(codec_pool.THREADS_ENV, value)
    with pytest.raises(UsageError, match=f"JAXATTN_CODEC_THREADS={value!r}: .* from 1 to 256"):
        codec_pool.workers()


def test_serve_refuses_a_pool_size_that_is_not_a_number_before_it_loads(monkeypatch, capsys):
    from jaxattn.cli import main

    def load(*args, **kwargs):
        raise AssertionError("the model was loaded before the setting was checked")

    monkeypatch.setattr("jaxattn.load", load)
    monkeypatch.setenv("JAXATTN_CODEC_THREADS", "lots")
    code = main(["serve", "--port", "0"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "JAXATTN_CODEC_THREADS='lots': the codec pool's threads must be a whole number" in err


def test_a_client_refuses_a_pool_size_that_is_not_a_number_when_it_is_made(monkeypatch):
    """Review 2026-11-28: not as the server's DATA_LOSS at the first large chunk."""
    from jaxattn.client import AttentionClient

    monkeypatch.setenv(codec_pool.THREADS_ENV, "lots")
    with pytest.raises(UsageError, match="JAXATTN_CODEC_THREADS='lots'"):
        AttentionClient("127.0.0.1:1")


def test_a_decoder_passes_a_bad_pool_size_on_as_the_usage_error_it_is(monkeypatch):
    """The pool is made at the first chunk it decodes: its UsageError is not a WireError
    ("an unparsable chunk", which the client reports as the server's DATA_LOSS)."""
    messages = list(send.serialize_example(0, example(1), codec="zstd", max_chunk_bytes=PIECE))
    monkeypatch.setenv(codec_pool.THREADS_ENV, "lots")
    monkeypatch.setattr(codec_pool, "_pool", None)
    decoder = StreamDecoder()
    with pytest.raises(UsageError, match="JAXATTN_CODEC_THREADS='lots'"):
        [c for m in messages for c in decoder.feed_all(m)]


def strided(cap: Capture, big_endian: bool = False) -> Capture:
    """`cap` with its attention map a view whose last axis is strided (every other
    item of a wider block), or (`big_endian`) in big-endian uint16 items: tensors the
    compressor cannot cut in place."""
    att = cap.tensors["attention"]
    if big_endian:
        att = att.astype(">u2")
    else:
        wide = np.zeros((*att.shape[:-1], 2 * att.shape[-1]), att.dtype)
        wide[..., ::2] = att
        att = wide[..., ::2]
    dtype = "float16" if big_endian else "uint8"  # float16: two bytes an item, as >u2
    return dataclasses.replace(cap, tensors={"attention": att}, dtype=dtype)


@pytest.mark.parametrize("big_endian", [False, True])
def test_a_tensor_that_cannot_be_cut_in_place_is_not_looked_ahead_to(compressed, big_endian):
    """Its contiguous copy is made when it is sent, not while the example before is."""
    first, second = example(1), strided(example(2), big_endian)
    compressor = send.Compressor("zstd", PIECE, lambda: second)
    free = free_slots()
    assert len(list(compressor.pieces(first))) == 3
    settle()
    assert len(compressed) == 3  # the first example's pieces only: none of it begun ahead
    got = list(compressor.pieces(second))
    raw = np.ascontiguousarray(second.tensors["attention"].astype("<u2" if big_endian else "u1"))
    raw = raw.tobytes()
    pieces = len(raw) // PIECE
    assert [p[:3] for p in got] == [
        ("attention", k * PIECE, (k + 1) * PIECE) for k in range(pieces)
    ]
    for k, (*_, (data, used, crc)) in enumerate(got):
        piece = raw[k * PIECE : (k + 1) * PIECE]
        assert (bytes(data), used, crc) == (compress(piece, "zstd"), "zstd", zlib.crc32(piece))
    compressor.close()
    assert free_slots() == free


class Unplannable:
    """A next item whose tensors cannot be read."""

    @property
    def tensors(self):
        raise RuntimeError("no tensors here")


def test_an_example_that_fails_to_plan_ahead_fails_when_it_is_sent_not_before():
    first, broken = example(1), Unplannable()
    compressor = send.Compressor("zstd", PIECE, lambda: broken)
    free = free_slots()
    assert len(list(compressor.pieces(first))) == 3  # the look-ahead's error is not first's
    with pytest.raises(RuntimeError, match="no tensors here"):
        list(compressor.pieces(broken))
    compressor.close()
    assert free_slots() == free


def strided_example(seed: int) -> Capture:
    """4 MB of uint8 attention, a strided view of its batch block as the engine gives it."""
    block = np.random.default_rng(seed).integers(0, 4, (2, 4, 1030, 1030)).astype(np.uint8)
    return Capture(
        tokens=("w",) * 1000,
        sentence_b_start=None,
        layers=(0,),
        heads=(0, 1, 2, 3),
        dtype="uint8",
        tensors={"attention": block[0:1, :, :1000, :1000]},
        quantization={"attention": (1 / 255, 0.0)},
    )


def held_peak(look_ahead: bool) -> int:
    """The most bytes a compressed call of four strided examples allocated beside its
    job's buffer while it was sent (tracemalloc: numpy's arrays and the pool's
    threads' allocations included)."""
    caps = [strided_example(i) for i in range(4)]
    job = Job(spec=None, tokenized=[0, 1, 2, 3], lock=threading.Lock())
    with job.lock:
        for i, c in enumerate(caps):
            job.put(i, c)
    if not look_ahead:
        job.peek = lambda: None
    parsed = types.SimpleNamespace(codec="zstd", max_chunk_bytes=1 << 20, coalesce=False)
    settle()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for _ in _serialized(job, parsed):
            pass
        settle()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_a_compressed_call_copies_no_strided_tensor_whole_ahead_or_not(monkeypatch):
    """Review 2026-11-28: the look-ahead made the next example's contiguous copy while
    this one's was held (peak 2.5 examples' bytes, 1.6 without it). Now the pieces are
    copied out on the pool: the look-ahead holds no more than a call without it but a
    piece or two, and neither holds a whole example's copy (a pool of two threads: three
    pieces of 512 KiB in flight, each with its compressed bytes, 0.85 of an example)."""
    shared = codec_pool._Pool(2)
    monkeypatch.setattr(codec_pool, "_pool", shared)
    try:
        ahead, alone = held_peak(True), held_peak(False)
    finally:
        shared.executor.shutdown()
    one = 4 * 1000 * 1000
    assert ahead <= alone + 2 * codec_pool.PIECE_BYTES, (ahead / one, alone / one)
    assert max(ahead, alone) < one, (ahead / one, alone / one)
