"""The client's chunk receiver (`jaxattn.wire.receive.StreamDecoder`) fed the responses of
a hostile server: a stream must give valid Captures (whose tensors index as their
headers say) or a WireError, never crash or hang the client.

An input is a mode byte, then a sequence of response messages, each a varint
length and that many bytes (the seeds are real streams from `jaxattn.wire.send`,
plain and coalesced: several items per message, `jaxattn.wire.coalesce`); each
goes through `feed_all`, then `finish`. Mode 1 is a server that lies
carefully: each chunk's CRC-32 is made right for its (uncompressed) data before
it is sent, so the mutations reach what the decoder does after the checksum.
"""

from __future__ import annotations

import numpy as np
from capture_samples import make

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
    from jaxattn.wire.receive import StreamDecoder

    decoder = StreamDecoder(TEXTS)
    for message in messages(data[1:]):
        if data[:1] == b"\x01":
            message = right_crc(message)
        for cap in decoder.feed_all(message):
            assert cap.dtype in OUTPUT_DTYPES
            for name, array in cap.tensors.items():  # a newer server's quantity may come
                assert isinstance(array, np.ndarray) and isinstance(name, str), name
            if cap.layers and cap.heads:  # its tensors index as its header says
                cap.select(layers=cap.layers[-1:], heads=cap.heads[-1:])
    decoder.finish()
