"""The reading thread's fast paths (`protowire._split_one`, `codec_pool.Job` done here,
the pool's slots, the CRC-32 error's words) against independent references: protobuf's
own parse of the same bytes, hand-built messages, zlib's CRC-32."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from test_service_wire import DTYPES

from jaxattn.capture import Capture
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import ChecksumError, StreamDecoder, codec_pool, protowire
from jaxattn.wire.coalesce import serialize_coalesced
from jaxattn.wire.send import serialize_example


def chunk_fields(**overrides) -> pb.TensorChunk:
    """A chunk whose varints take 1 to 10 bytes (a large crc32, example index, offsets)."""
    fields = dict(
        example_index=300,
        tensor="attention",
        datatype="UINT8",
        shape=[2, 3, 200, 200],
        codec=pb.CODEC_ZSTD,
        scale=0.5,
        offset=-1.25,
        byte_offset=1 << 21,
        byte_length=77,
        total_bytes=240000,
        crc32=0xFFFFFFFF,
    )
    return pb.TensorChunk(**{**fields, **overrides})


def framed(chunk: pb.TensorChunk, data: bytes, pad: int = 0, data_first: bool = False) -> bytes:
    """A CaptureResponse{chunk} written by hand: the chunk's fields, a padding field of
    `pad` bytes, then the data field (or the data field first)."""
    head = chunk.SerializeToString()
    data_field = protowire.length_delimited(protowire.DATA_TAG, len(data)) + data
    padding = protowire.padding(pad) if pad else b""
    body = data_field + head + padding if data_first else head + padding + data_field
    return protowire.length_delimited(protowire.CHUNK_TAG, len(body)) + body


@pytest.mark.parametrize("data_first", [False, True])
@pytest.mark.parametrize("pad", [0, 2, 17, 200])
@pytest.mark.parametrize("data_len", [0, 1, 127, 128, 16385])
def test_a_chunk_splits_into_what_protobuf_parses(data_len, pad, data_first):
    data = bytes(range(256)) * (data_len // 256) + bytes(range(data_len % 256))
    chunk = chunk_fields(byte_length=data_len)
    message = framed(chunk, data, pad, data_first)
    reference = pb.CaptureResponse.FromString(message).chunk  # protobuf's own parse
    ((kind, fields, got),) = protowire.split_items(message)
    assert kind == "chunk" and bytes(got) == data == reference.data
    parsed = pb.TensorChunk.FromString(fields)
    reference.ClearField("data")
    reference.ClearField("padding")
    assert parsed == reference == chunk


def test_a_chunk_the_walk_cannot_read_is_left_to_protobuf():
    chunk, data = chunk_fields(byte_length=3), b"abc"
    good = framed(chunk, data)
    body = good[2:]  # past the chunk's tag and 1-byte length
    eleven = bytes([0x08]) + b"\xff" * 10 + b"\x01"  # example_index: an 11-byte varint
    cut = bytes([0x08]) + b"\xff\xff"  # example_index: a varint cut by the body's end
    twice = body + protowire.length_delimited(protowire.DATA_TAG, 1) + b"z"  # data twice
    for bad in (eleven + body, body + cut, twice):
        message = protowire.length_delimited(protowire.CHUNK_TAG, len(bad)) + bad
        assert protowire.split_items(message) is None
        assert protowire.first_item(message) is None


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 16383, 16384, 1 << 21, (1 << 35) + 5])
def test_varint_is_protobufs_encoding(n):
    want = pb.TensorChunk(total_bytes=n).SerializeToString()[1:]  # after the 1-byte tag
    assert protowire.varint(n) == (want or b"\x00")
    assert protowire.read_varint(b"\x00" + protowire.varint(n), 1) == (n, 1 + len(want or b"0"))


def test_a_negative_varint_is_refused():
    with pytest.raises(ValueError):
        protowire.varint(-1)


def compressible(t: int, dtype: str, seed: int) -> Capture:
    """Odd-sized maps of few distinct values (zstd and lz4 shrink them)."""
    rng = np.random.default_rng(seed)
    att = (rng.integers(0, 4, (2, 3, t, t)) / 4).astype(np.float32)
    tensors = {"attention": (att * 255).astype(np.uint8) if dtype == "uint8" else att}
    if dtype != "uint8":
        tensors = {"attention": att.astype(DTYPES[dtype])}
    return Capture(
        tokens=tuple(f"w{i}" for i in range(t)),
        sentence_b_start=None,
        layers=(0, 2),
        heads=(0, 1, 2),
        dtype=dtype,
        tensors=tensors,
        quantization={"attention": (1 / 255, 0.0)} if dtype == "uint8" else {},
    )


@pytest.mark.parametrize("coalesced", [False, True])
@pytest.mark.parametrize("codec", ["none", "zstd", "lz4"])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_odd_sizes_come_back_byte_for_byte(dtype, codec, coalesced, monkeypatch):
    monkeypatch.setattr(codec_pool, "DECODE_MIN", 0)  # every compressed chunk offered
    caps = [compressible(t, dtype, seed=t) for t in (1, 13, 37)]
    kw = {"codec": codec, "max_chunk_bytes": 1003}  # odd pieces, a short last one
    if coalesced:
        messages = list(serialize_coalesced(enumerate(caps), ready=lambda: True, **kw))
    else:
        messages = [m for i, c in enumerate(caps) for m in serialize_example(i, c, **kw)]
    used = {
        item.chunk.codec
        for m in messages
        for item in (pb.CaptureResponse.FromString(m).items or [pb.CaptureResponse.FromString(m)])
        if item.HasField("chunk")
    }
    want_codec = {"none": pb.CODEC_NONE, "zstd": pb.CODEC_ZSTD, "lz4": pb.CODEC_LZ4}[codec]
    assert want_codec in used  # the codec was used, not only CODEC_NONE fallbacks
    decoder = StreamDecoder()
    got = [c for m in messages for c in decoder.feed_all(m)]
    decoder.finish()
    assert len(got) == len(caps)
    for g, c in zip(got, caps, strict=True):
        a, b = g.tensors["attention"], c.tensors["attention"]
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
        assert g.quantization == c.quantization


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_a_crc_mismatch_names_the_tensor_example_and_bytes(codec, monkeypatch):
    monkeypatch.setattr(codec_pool, "DECODE_MIN", 0)
    cap = compressible(37, "uint8", seed=1)
    messages = list(serialize_example(0, cap, codec=codec, max_chunk_bytes=4000))
    chunks = [pb.CaptureResponse.FromString(m) for m in messages]
    second = chunks[2].chunk  # bytes 4000..8000 of the map
    lo, hi = second.byte_offset, second.byte_offset + second.byte_length
    real = zlib.crc32(cap.tensors["attention"].tobytes()[lo:hi])
    second.crc32 = real ^ 1
    messages[2] = chunks[2].SerializeToString()
    decoder = StreamDecoder()
    want = (
        f"tensor 'attention' of example 0: CRC-32 mismatch in bytes {lo}..{hi} "
        f"(got {real:#010x}, chunk says {real ^ 1:#010x})"
    )
    with pytest.raises(ChecksumError) as e:
        for m in messages:
            decoder.feed_all(m)
        decoder.finish()
    assert str(e.value) == want


def test_a_job_done_here_keeps_its_result_or_raises_its_error_each_time():
    job = codec_pool.start(lambda a, b: a + b, 2, 3, size=0, least=1)
    assert job.done() and not job.cancelled() and not job.cancel()
    assert job.result() == 5 and job.result() == 5

    def broken():
        raise KeyError("chunk 7")

    bad = codec_pool.start(broken, size=0, least=1)
    for _ in range(2):
        with pytest.raises(KeyError, match="chunk 7"):
            bad.result()


def test_the_slots_count_and_refuse_a_give_back_too_many():
    slots = codec_pool._Slots(2)
    assert slots.take() and slots.take()
    assert not slots.take()
    slots.give_back()
    assert slots.take()
    slots.give_back()
    slots.give_back()
    with pytest.raises(RuntimeError, match="given back more times"):
        slots.give_back()
