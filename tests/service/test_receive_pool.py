"""The client's chunks decoded on the codec pool (`wire.receive`, `codec_pool.start`).

The same arrays as decoded in the reading thread, bit for bit, for every codec,
dtype, chunking and coalescing; the pool really used (the chunks given to it
counted); no more chunks held by it than the process's slots, the rest decoded
where they are read; a chunk that does not decode raising the same
error at the same point of the stream either way; and every slot given back
however a stream ends, through the client too (a cut stream resumed, a stream
closed part-way).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import re
import threading

import grpc
import numpy as np
import pytest
from codec_pool_support import free_slots, free_slots_now
from local_server import fake_service
from test_service_wire import make_capture, same

from jaxattn.client import AttentionClient, AttentionServiceError
from jaxattn.dtypes import OUTPUT_DTYPES
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import (
    CODECS,
    ChecksumError,
    StreamDecoder,
    WireError,
    codec_pool,
    receive,
    serialize_coalesced,
    serialize_example,
)
from jaxattn.wire.codecs import checksum, compress, decompress, decompress_into


def compressible(t: int, dtype: str, seed: int = 0):
    """A capture of odd sizes whose pieces shrink (so they go compressed, not as none)."""
    cap = make_capture(t, dtype, seed=seed, pair=seed % 2 == 1)
    if dtype == "uint8":
        tensors = {n: a // 64 for n, a in cap.tensors.items()}
    else:
        tensors = {
            n: (np.round(a.astype(np.float32) * 4) / 4).astype(a.dtype)
            for n, a in cap.tensors.items()
        }
    return dataclasses.replace(cap, tensors=tensors)


def stream(caps, codec: str, coalesced: bool, chunk: int = 2048) -> list[bytes]:
    if coalesced:
        examples = list(enumerate(caps))
        return list(
            serialize_coalesced(examples, codec=codec, max_chunk_bytes=chunk, ready=lambda: True)
        )
    return [
        m
        for i, c in enumerate(caps)
        for m in serialize_example(i, c, codec=codec, max_chunk_bytes=chunk)
    ]


def chunks_of(messages) -> list[pb.TensorChunk]:
    out = []
    for m in messages:
        parsed = pb.CaptureResponse.FromString(m)
        out += [i.chunk for i in (parsed.items or [parsed]) if i.WhichOneof("item") == "chunk"]
    return out


@pytest.fixture
def decodes(monkeypatch):
    """Chunk decodes counted: "decoded" (all, wherever they ran), "pool" (given to the
    pool: begun on its threads, or taken back by the reader that would only wait);
    every compressed chunk is offered to the pool (DECODE_MIN 0), from a pool at rest."""
    monkeypatch.setattr(codec_pool, "DECODE_MIN", 0)
    seen, lock = collections.Counter(), threading.Lock()
    real_decode, real_offer = receive._decode, codec_pool._offer

    def decoded(*args):
        with lock:
            seen["decoded"] += 1
        return real_decode(*args)

    def offered(shared, work, *args):
        future = real_offer(shared, work, *args)
        if future is not None and work is decoded:
            seen["pool"] += 1
        return future

    monkeypatch.setattr(receive, "_decode", decoded)
    monkeypatch.setattr(codec_pool, "_offer", offered)
    free_slots()  # what an earlier test left decoding is done: every slot free
    return seen


def decode(messages, least: float) -> list:
    """The stream's Captures, compressed chunks decoded on the pool from `least` bytes."""
    old, codec_pool.DECODE_MIN = codec_pool.DECODE_MIN, least
    try:
        decoder = StreamDecoder()
        caps = [c for m in messages for c in decoder.feed_all(m)]
        decoder.finish()
        return caps
    finally:
        codec_pool.DECODE_MIN = old


@pytest.mark.parametrize("coalesced", [False, True], ids=["plain", "coalesced"])
@pytest.mark.parametrize("dtype", list(OUTPUT_DTYPES))
@pytest.mark.parametrize("codec", CODECS)
def test_decoded_on_the_pool_is_what_was_sent_bit_for_bit(codec, dtype, coalesced, decodes):
    free = free_slots()
    caps = [compressible(t, dtype, seed=t) for t in (3, 29, 41)]  # 1 to 16 chunks a tensor
    messages = stream(caps, codec, coalesced)
    chunks = chunks_of(messages)
    packed = sum(c.codec != pb.CODEC_NONE for c in chunks)
    assert (packed > len(chunks) // 2) == (codec != "none")
    serial = decode(messages, math.inf)
    assert decodes == {"decoded": len(chunks)}  # none on the pool
    decodes.clear()
    pooled = decode(messages, 0)
    for got in (serial, pooled):
        assert len(got) == len(caps) and all(same(g, c) for g, c in zip(got, caps, strict=True))
        for g in got:
            assert all(not a.flags.writeable for a in g.tensors.values())
    assert decodes["decoded"] == len(chunks)
    if codec == "none":  # copies and CRC-32s never pay for the hand-off
        assert decodes["pool"] == 0
    else:  # the first chunks at least, while the slots free at first last
        assert decodes["pool"] >= min(packed, free) >= 1


def test_a_one_chunk_lz4_tensor_is_read_where_it_decoded(decodes):
    cap = compressible(9, "float32")
    (got,) = decode(stream([cap], "lz4", coalesced=False, chunk=1 << 20), 0)
    assert same(got, cap) and decodes["pool"] == 2  # its two tensors, one chunk each
    memory = got.tensors["attention"]
    while isinstance(memory, np.ndarray):
        memory = memory.base
    assert isinstance(memory, bytes)  # the bytes lz4 made, not a copy of them
    assert got.tensors["attention"].ctypes.data % 4 == 0


def test_the_chunks_on_the_pool_are_bounded_by_its_slots_the_rest_decode_here(monkeypatch):
    monkeypatch.setattr(codec_pool, "DECODE_MIN", 0)
    gate, real = threading.Event(), receive._decode

    def held(*args):  # a chunk on the pool waits for the gate; one decoded here does not
        if threading.current_thread().name.startswith("jaxattn-codec"):
            gate.wait(30)
        return real(*args)

    monkeypatch.setattr(receive, "_decode", held)
    free = free_slots()
    cap = compressible(41, "float32")
    messages = stream([cap], "zstd", coalesced=False, chunk=1024)
    assert len(messages) > free + 4
    decoder = StreamDecoder()
    try:
        for m in messages[:-1]:
            assert decoder.feed_all(m) == []
        waiting = [f for _, f in decoder.jobs if not f.done()]
        assert len(waiting) == free and free_slots_now() == 0
        assert all(f.done() for _, f in decoder.jobs if f not in waiting)
    finally:
        gate.set()
    (got,) = decoder.feed_all(messages[-1])
    assert same(got, cap)
    assert free_slots() == free


def corrupt(chunk: pb.TensorChunk, how: str) -> None:
    """Break one compressed chunk as a hostile server would."""
    if how == "truncated":
        chunk.data = chunk.data[: len(chunk.data) // 2]
    elif how == "crc":
        chunk.crc32 ^= 1
    elif how == "longer":  # a frame of more bytes than the chunk announces
        chunk.data = compress(
            bytes(chunk.byte_length + 100), "zstd" if chunk.codec == pb.CODEC_ZSTD else "lz4"
        )
    elif how == "shorter":
        chunk.data = compress(
            bytes(chunk.byte_length - 8), "zstd" if chunk.codec == pb.CODEC_ZSTD else "lz4"
        )
    else:
        raise AssertionError(how)


def broken(codec: str, how: str, *, then: str | None = None) -> list[bytes]:
    """A plain stream of three examples whose example 1 has its 2nd chunk broken;
    `then`: "offset" (a later chunk of it out of place) or "end" (the stream ends
    after that chunk)."""
    caps = [compressible(23, "float32", seed=s) for s in range(3)]
    messages = [pb.CaptureResponse.FromString(m) for m in stream(caps, codec, coalesced=False)]
    at = [k for k, m in enumerate(messages) if m.chunk.example_index == 1 and m.chunk.tensor][1]
    assert messages[at].chunk.codec != pb.CODEC_NONE
    corrupt(messages[at].chunk, how)
    if then == "offset":
        messages[at + 2].chunk.byte_offset += 1
    elif then == "end":
        messages = messages[: at + 2]
    return [m.SerializeToString() for m in messages]


def outcome(messages, least: float) -> tuple[int, type | None, str]:
    """(examples returned, the error's class, its message) of decoding `messages`."""
    old, codec_pool.DECODE_MIN = codec_pool.DECODE_MIN, least
    decoder, got = StreamDecoder(), 0
    try:
        for m in messages:
            got += len(decoder.feed_all(m))
        decoder.finish()
    except WireError as e:
        return got, type(e), str(e)
    finally:
        codec_pool.DECODE_MIN = old
    return got, None, ""


@pytest.mark.parametrize(
    "codec, how, then, error, message",
    [
        ("zstd", "truncated", None, WireError, "cannot decode a zstd chunk"),
        ("lz4", "truncated", None, WireError, "(cannot decode )?a lz4 chunk"),
        ("zstd", "crc", None, ChecksumError, "tensor 'attention' of example 1: CRC-32 mismatch"),
        ("lz4", "crc", None, ChecksumError, "tensor 'attention' of example 1: CRC-32 mismatch"),
        ("zstd", "longer", None, WireError, r"a zstd chunk decoded to \d+ bytes, expected 2048"),
        ("lz4", "longer", None, WireError, "a lz4 chunk decoded to more than 2048 bytes"),
        ("zstd", "shorter", None, WireError, "a zstd chunk decoded to 2040 bytes, expected 2048"),
        ("zstd", "truncated", "offset", WireError, "cannot decode a zstd chunk"),
        ("zstd", "crc", "end", ChecksumError, "tensor .attention. of example 1: CRC-32 mismatch"),
    ],
)
def test_a_bad_chunk_raises_the_same_error_at_the_same_point_either_way(
    codec, how, then, error, message, decodes
):
    """Example 0 is returned, then the chunk's own error: before a later chunk's
    protocol error, before the stream's end mid-example."""
    messages = broken(codec, how, then=then)
    serial, pooled = outcome(messages, math.inf), outcome(messages, 0)
    assert serial == pooled
    assert decodes["pool"] >= 1
    got, kind, text = pooled
    assert got == 1 and kind is error
    assert re.match(message, text), text


def test_in_a_coalesced_message_a_bad_chunk_comes_before_a_later_problem(decodes):
    """Two examples in one message, the first's chunk corrupt, the second's header
    out of order: the corrupt chunk is the error (the stream's first problem)."""
    caps = [compressible(23, "float32", seed=s) for s in range(2)]
    items = [
        i
        for m in stream(caps, "zstd", coalesced=True, chunk=1 << 20)
        for i in (pb.CaptureResponse.FromString(m).items or [pb.CaptureResponse.FromString(m)])
    ]
    first = next(i for i in items if i.chunk.tensor and i.chunk.codec == pb.CODEC_ZSTD)
    corrupt(first.chunk, "truncated")
    second = [i for i in items if i.WhichOneof("item") == "header"][1]
    second.header.index = 5
    message = pb.CaptureResponse(items=items).SerializeToString()
    serial, pooled = outcome([message], math.inf), outcome([message], 0)
    assert serial == pooled and decodes["pool"] >= 1
    assert pooled[:2] == (0, WireError) and pooled[2].startswith("cannot decode a zstd chunk")
    second.header.index = 1  # the second example sound: the same error, the same point
    message = pb.CaptureResponse(items=items).SerializeToString()
    assert outcome([message], math.inf) == outcome([message], 0) == pooled


@pytest.mark.parametrize("end", ["error", "cut", "closed"])
def test_however_a_stream_ends_every_slot_comes_back(end, decodes):
    free = free_slots()
    caps = [compressible(41, "float32", seed=s) for s in range(3)]
    messages = stream(caps, "zstd", coalesced=False, chunk=1024)
    if end == "error":
        messages = broken("zstd", "truncated")
    decoder = StreamDecoder()
    with pytest.raises(WireError) if end == "error" else contextlib.nullcontext():
        for m in messages if end == "error" else messages[: len(messages) // 2]:
            decoder.feed_all(m)
    if end == "closed":
        decoder.close()
    del decoder  # a cut stream: abandoned mid-example, its chunks decoding
    assert decodes["pool"] >= 1
    assert free_slots() == free


def test_decompress_into_never_writes_past_its_buffer():
    data = np.arange(4096, dtype=np.uint8) % 7
    for codec in ("zstd", "lz4"):
        frame = compress(data.tobytes(), codec)
        whole = np.full(4096 + 16, 0xAB, np.uint8)
        decompress_into(frame, codec, whole[:4096])
        assert whole[:4096].tobytes() == data.tobytes() and (whole[4096:] == 0xAB).all()
        for short in (4000, 1):  # the frame makes more than the buffer holds
            whole = np.full(short + 16, 0xAB, np.uint8)
            with pytest.raises(WireError, match=f"a {codec} chunk decoded to"):
                decompress_into(frame, codec, whole[:short])
            assert (whole[short:] == 0xAB).all()
        with pytest.raises(WireError):  # bytes after the frame
            decompress_into(frame + b"\x00\x01", codec, np.empty(4096, np.uint8))
    import zstandard

    unsized = zstandard.ZstdCompressor(write_content_size=False).compress(data.tobytes())
    whole = np.full(4000 + 16, 0xAB, np.uint8)
    with pytest.raises(WireError, match="cannot decode a zstd chunk"):  # as before the pool
        decompress_into(unsized, "zstd", whole[:4000])
    assert (whole[4000:] == 0xAB).all()
    assert bytes(decompress(unsized, "zstd", 4096)) == data.tobytes()
    assert checksum(decompress(frame, "lz4", 4096)) == checksum(data)


class Stream:
    """A fake server's Capture call: three examples of large zstd chunks, the first
    call cut (UNAVAILABLE) part-way through example 1 where `cut`."""

    def __init__(self, cut: bool):
        self.cut, self.calls = cut, []
        self.caps = [compressible(41, "float32", seed=s) for s in range(3)]

    def capture(self, request, context):
        self.calls.append(len(request.texts))
        first = len(self.caps) - len(request.texts)
        messages = [
            m
            for k in range(len(request.texts))
            for m in serialize_example(k, self.caps[first + k], codec="zstd", max_chunk_bytes=1024)
        ]
        if self.cut and len(self.calls) == 1:
            per = len(messages) // 3
            yield from messages[: per + per // 2]  # example 0, half of example 1
            context.abort(grpc.StatusCode.UNAVAILABLE, "cut")
        yield from messages

    def info(self, request, context):
        return pb.ModelInfo(name="fake", layers=2, heads=3, weights="blake2b:fake")


def test_through_the_client_a_cut_stream_resumes_and_gives_every_slot_back(decodes):
    free = free_slots()
    server = Stream(cut=True)
    with fake_service(server.capture, server.info) as address:
        with AttentionClient(address, timeout=30, retries=3, backoff=(0.01, 0.02)) as client:
            got = client.capture(["a", "b", "c"])
    assert server.calls == [3, 2]  # the rest asked from example 1 on
    assert all(same(g, c) for g, c in zip(got, server.caps, strict=True))
    assert decodes["pool"] >= 1
    assert free_slots() == free


def test_through_the_client_a_stream_closed_part_way_gives_every_slot_back(decodes):
    free = free_slots()
    server = Stream(cut=False)
    with fake_service(server.capture, server.info) as address:
        with AttentionClient(address, timeout=30) as client:
            captures = client.stream(["a", "b", "c"])
            assert same(next(captures), server.caps[0])
            captures.close()
    assert decodes["pool"] >= 1
    assert free_slots() == free


def test_through_the_client_a_corrupt_chunk_is_data_loss_after_the_examples_before_it(decodes):
    server = Stream(cut=False)
    real = server.capture

    def corrupted(request, context):
        seen = 0  # example 1's chunks
        for m in real(request, context):
            parsed = pb.CaptureResponse.FromString(m)
            if parsed.chunk.tensor and parsed.chunk.example_index == 1:
                seen += 1
                if seen == 3:
                    assert parsed.chunk.codec == pb.CODEC_ZSTD
                    corrupt(parsed.chunk, "truncated")
                    m = parsed.SerializeToString()
            yield m

    got = []
    with fake_service(corrupted, server.info) as address:
        with AttentionClient(address, timeout=30, retries=0) as client:
            with pytest.raises(AttentionServiceError, match="cannot decode a zstd chunk") as e:
                got.extend(client.stream(["a", "b", "c"]))
    assert e.value.code.name == "DATA_LOSS"
    assert len(got) == 1 and same(got[0], server.caps[0])
