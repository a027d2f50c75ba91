"""The chunk codec on its own: lossless for every dtype x codec, and strict on bad streams."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxattn.capture import Capture
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import ChecksumError, StreamDecoder, WireError, chunk_example

DTYPES = {
    "float32": np.float32,
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "uint8": np.uint8,
}


def make_capture(t: int, dtype: str, seed: int = 0, pair: bool = False) -> Capture:
    rng = np.random.default_rng(seed)
    att = rng.random((2, 3, t, t)).astype(np.float32)
    hid = rng.normal(size=(3, t, 7)).astype(np.float32)
    if dtype == "uint8":
        tensors = {
            "attention": np.round(att * 255).astype(np.uint8),
            "hidden_states": rng.integers(0, 256, hid.shape, dtype=np.uint8),
        }
        quant = {"attention": (1 / 255, 0.0), "hidden_states": (0.0123, -1.5)}
    else:
        cast = DTYPES[dtype]
        tensors = {"attention": att.astype(cast), "hidden_states": hid.astype(cast)}
        quant = {}
    return Capture(
        tokens=tuple(f"w{i}" for i in range(t)),
        sentence_b_start=2 if pair else None,
        layers=(0, 2),
        heads=(0, 1, 2),
        dtype=dtype,
        tensors=tensors,
        quantization=quant,
    )


def decode_all(messages) -> list[Capture]:
    decoder = StreamDecoder()
    out = [c for m in messages if (c := decoder.feed(m)) is not None]
    decoder.finish()
    return out


def same(a: Capture, b: Capture) -> bool:
    return (
        (a.tokens, a.sentence_b_start, a.layers, a.heads, a.dtype, a.quantization)
        == (
            b.tokens,
            b.sentence_b_start,
            b.layers,
            b.heads,
            b.dtype,
            b.quantization,
        )
        and all(
            a.tensors[k].dtype == v.dtype and a.tensors[k].tobytes() == v.tobytes()
            for k, v in b.tensors.items()
        )
        and list(a.tensors) == list(b.tensors)
    )


@pytest.mark.parametrize("codec", ["none", "zstd", "lz4"])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_every_dtype_and_codec_is_lossless(dtype, codec):
    caps = [make_capture(t, dtype, seed=t, pair=t % 2 == 0) for t in (2, 9, 31)]
    messages = [
        m
        for i, c in enumerate(caps)
        for m in chunk_example(i, c, codec=codec, max_chunk_bytes=1024)
    ]
    got = decode_all(messages)
    assert len(got) == 3 and all(same(g, c) for g, c in zip(got, caps, strict=True))


@settings(max_examples=40, deadline=None)
@given(
    t=st.integers(1, 40),
    chunk=st.integers(1024, 20000),
    codec=st.sampled_from(["none", "zstd", "lz4"]),
    n=st.integers(1, 4),
)
def test_any_chunk_size_reassembles_and_never_exceeds_the_bound(t, chunk, codec, n):
    caps = [make_capture(t, "float32", seed=i) for i in range(n)]
    messages = [
        m
        for i, c in enumerate(caps)
        for m in chunk_example(i, c, codec=codec, max_chunk_bytes=chunk)
    ]
    for m in messages:
        if m.WhichOneof("item") == "chunk":
            assert len(m.chunk.data) <= chunk and m.chunk.byte_length <= chunk
    assert all(same(g, c) for g, c in zip(decode_all(messages), caps, strict=True))


def chunks_of(codec="none", chunk=1024):
    return list(chunk_example(0, make_capture(12, "float32"), codec=codec, max_chunk_bytes=chunk))


def test_checksum_mismatch_is_detected():
    messages = chunks_of()
    data = bytearray(messages[3].chunk.data)
    data[17] ^= 0x01  # one flipped bit
    messages[3].chunk.data = bytes(data)
    with pytest.raises(ChecksumError, match="CRC-32 mismatch"):
        decode_all(messages)


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_corrupt_compressed_chunk_is_detected(codec):
    zeros = np.zeros((2, 3, 20, 20), np.float32)
    cap = Capture(
        tokens=("a",) * 20,
        sentence_b_start=None,
        layers=(0, 1),
        heads=(0, 1, 2),
        dtype="float32",
        tensors={"attention": zeros},
    )
    messages = list(chunk_example(0, cap, codec=codec, max_chunk_bytes=1 << 20))
    chunk = next(m.chunk for m in messages if m.WhichOneof("item") == "chunk")
    assert chunk.codec != pb.CODEC_NONE
    chunk.data = chunk.data[: len(chunk.data) // 2]
    with pytest.raises(WireError):
        decode_all(messages)


def breaks(mutate) -> str:
    messages = chunks_of()
    mutate(messages)
    with pytest.raises(WireError) as info:
        decode_all(messages)
    return str(info.value)


def test_protocol_breaches_are_reported():
    assert "incomplete" in breaks(lambda m: m.pop())  # stream ends mid-example
    assert "contiguous" in breaks(lambda m: m.pop(2))  # a chunk missing
    assert "unknown datatype" in breaks(lambda m: setattr(m[1].chunk, "datatype", "FP64"))
    assert "total_bytes" in breaks(lambda m: m[1].chunk.shape.append(2))
    assert "unannounced" in breaks(lambda m: setattr(m[1].chunk, "tensor", "scores"))
    assert "expected 0" in breaks(lambda m: setattr(m[0].header, "index", 1))
    assert "neither" in breaks(lambda m: m.insert(1, pb.CaptureResponse()))
    assert "outside its example" in breaks(lambda m: setattr(m[1].chunk, "example_index", 5))


def test_incompressible_chunks_fall_back_to_none():
    rng = np.random.default_rng(1)
    noise = rng.integers(0, 256, (1, 1, 64, 64), dtype=np.uint8)
    cap = Capture(
        tokens=("a",) * 64,
        sentence_b_start=None,
        layers=(0,),
        heads=(0,),
        dtype="uint8",
        tensors={"attention": noise},
        quantization={"attention": (1 / 255, 0.0)},
    )
    messages = list(chunk_example(0, cap, codec="zstd", max_chunk_bytes=1024))
    assert all(m.chunk.codec == pb.CODEC_NONE for m in messages[1:])
    assert same(decode_all(messages)[0], cap)


@pytest.mark.parametrize("codec", ["none", "zstd", "lz4"])
def test_serialized_fast_path_is_plain_protobuf(codec):
    from jaxattn.wire import serialize_example

    caps = [make_capture(t, "float32", seed=t) for t in (3, 17)]
    fast = [
        b
        for i, c in enumerate(caps)
        for b in serialize_example(i, c, codec=codec, max_chunk_bytes=1024)
    ]
    slow = [
        m
        for i, c in enumerate(caps)
        for m in chunk_example(i, c, codec=codec, max_chunk_bytes=1024)
    ]
    assert fast == [m.SerializeToString() for m in slow]  # byte for byte what protobuf writes
    decoder = StreamDecoder()
    got = [c for b in fast if (c := decoder.feed_bytes(b)) is not None]
    assert all(same(g, c) for g, c in zip(got, caps, strict=True))


def test_feed_bytes_accepts_any_field_order_and_falls_back_to_protobuf():
    from jaxattn.wire import protowire

    messages = chunks_of(chunk=1 << 20)
    raw = []
    for m in messages:
        if m.WhichOneof("item") == "chunk":
            data = m.chunk.data
            head = pb.TensorChunk()
            head.CopyFrom(m.chunk)
            head.data = b""
            field = protowire.length_delimited(protowire.DATA_TAG, len(data)) + data
            body = field + head.SerializeToString()  # data first, as another library might
            raw.append(protowire.length_delimited(protowire.CHUNK_TAG, len(body)) + body)
        else:
            # An unknown field 15 after the header: protobuf skips it (fallback path).
            raw.append(m.SerializeToString() + bytes((15 << 3, 1)))
    decoder = StreamDecoder()
    (cap,) = [c for b in raw if (c := decoder.feed_bytes(b)) is not None]
    assert same(cap, make_capture(12, "float32"))
    with pytest.raises(WireError, match="unparsable"):
        StreamDecoder().feed_bytes(b"\x12\x05\x01")
