"""The client's chunk receiver (`jaxattn.wire.receive.StreamDecoder`) fed the responses of
a hostile server: a stream must give valid Captures (whose tensors index as their
headers say) or a WireError, never crash or hang the client.

An input is a mode byte, then a sequence of response messages, each a varint
length and that many bytes (the seeds are real streams from `jaxattn.wire.send`,
plain and coalesced: several items per message, `jaxattn.wire.coalesce`); each
goes through `feed_all`, then `finish`. Mode 1 is a server that lies
carefully: each chunk's CRC-32 is made right for its (uncompressed) data before
it is sent, so the mutations reach what the decoder does after the checksum.

Each stream is decoded twice, its compressed chunks decoded in the reading thread
and then on the codec pool's threads (`codec_pool.DECODE_MIN` 0): the same Captures
and the same error, at the same point, either way.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from capture_samples import make

from jaxattn.continuations import STOPS
from jaxattn.dtypes import OUTPUT_DTYPES
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import protowire
from jaxattn.wire.coalesce import serialize_coalesced
from jaxattn.wire.codecs import WireError, checksum
from jaxattn.wire.send import serialize_example

DESIGNED = (WireError,)
TOKENS = (
    b"\x0a",
    b"\x12",
    b"\x1a",  # CaptureResponse.items
    b"\x62",
    b"\x6a",  # TensorChunk.padding
    b"\x08\x01",
    b"\xff\xff\xff\xff\x0f",
    b"\x01" * 10,
)
TEXTS = ["a b", ("a", "b")]


def frame(messages) -> bytes:
    return b"".join(protowire.varint(len(m)) + bytes(m) for m in messages)


def seeds() -> list[bytes]:
    out = []
    for dtype, codec in zip(OUTPUT_DTYPES, ("none", "zstd", "lz4", "none"), strict=False):
        stream = []
        for index in range(2):
            stream += serialize_example(index, make(dtype), codec=codec, max_chunk_bytes=64)
        out += [b"\x00" + frame(stream), b"\x01" + frame(stream)]
        examples = [(index, make(dtype)) for index in range(3)]
        for bound in (1024, 1 << 20):  # items of one example, and of several, per message
            packed = serialize_coalesced(
                examples, codec=codec, max_chunk_bytes=bound, ready=lambda: True
            )
            out.append(b"\x01" + frame(packed))
    for codec in ("zstd", "lz4"):  # pieces that shrink: sent compressed, not as none
        stream = []
        for index in range(2):
            cap = make("float32")
            cap = dataclasses.replace(cap, tensors={n: a * 0 for n, a in cap.tensors.items()})
            stream += serialize_example(index, cap, codec=codec, max_chunk_bytes=256)
        out += [b"\x00" + frame(stream), b"\x01" + frame(stream)]
    return out


def messages(data: bytes):
    pos = 0
    while pos < len(data):
        try:
            size, pos = protowire.read_varint(data, pos)
        except ValueError:
            return
        yield data[pos : pos + size]
        pos += size


def right_crc(message: bytes) -> bytes:
    """`message` with its chunks' CRC-32 made right (its own chunk's, or its items'),
    where it parses and they are uncompressed."""
    try:
        parsed = pb.CaptureResponse.FromString(message)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError: send it as it is
        return message
    changed = False
    for item in [parsed, *parsed.items]:
        if item.WhichOneof("item") == "chunk" and item.chunk.codec in (0, pb.CODEC_NONE):
            item.chunk.crc32 = checksum(item.chunk.data)
            changed = True
    return parsed.SerializeToString() if changed else message


def one_input(data: bytes) -> None:
    inline, pooled = outcome(data, pool=False), outcome(data, pool=True)
    assert inline == pooled, (inline, pooled)
    if inline[1] is not None:
        raise inline[1][0](inline[1][1])


def outcome(data: bytes, pool: bool) -> tuple[list, tuple | None]:
    """(each Capture's fields and tensor bytes, (the error's class, its message) or None)."""
    from jaxattn.wire import codec_pool
    from jaxattn.wire.receive import StreamDecoder

    least, codec_pool.DECODE_MIN = codec_pool.DECODE_MIN, 0 if pool else 1 << 62
    decoder, got = StreamDecoder(TEXTS), []
    try:
        for message in messages(data[1:]):
            if data[:1] == b"\x01":
                message = right_crc(message)
            for cap in decoder.feed_all(message):
                got.append(seen(cap))
        decoder.finish()
    except WireError as e:
        return got, (type(e), str(e))
    finally:
        codec_pool.DECODE_MIN = least
        decoder.close()
    return got, None


def seen(cap) -> tuple:
    """What a Capture holds, checked: its tensors index as its header says."""
    assert cap.dtype in OUTPUT_DTYPES
    assert cap.stop is None or cap.stop in STOPS, cap.stop  # a known stop, or none
    for name, array in cap.tensors.items():  # a newer server's quantity may come
        assert isinstance(array, np.ndarray) and isinstance(name, str), name
    if cap.layers and cap.heads:  # its tensors index as its header says
        cap.select(layers=cap.layers[-1:], heads=cap.heads[-1:])
    arrays = tuple((n, a.dtype.str, a.shape, a.tobytes()) for n, a in cap.tensors.items())
    return cap.tokens, cap.layers, cap.heads, cap.text, cap.quantization, arrays
