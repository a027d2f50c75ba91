"""Sending (the server side): one example's `Capture` -> its header and tensor chunks.

Each tensor is cut into pieces of at most `max_chunk_bytes` decoded bytes and
each piece is compressed on its own; a piece that does not shrink is sent as
CODEC_NONE, so no chunk's data ever exceeds `max_chunk_bytes`. Pieces are
compressed lazily, as gRPC pulls the next message.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from jaxattn.capture import Capture
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import protowire
from jaxattn.wire.codecs import (
    CODEC_TO_PB,
    DATATYPES,
    PRECISION_TO_PB,
    checksum,
    compress,
    le_bytes,
)


def _pieces(nbytes: int, max_chunk_bytes: int) -> int:
    return max(1, math.ceil(nbytes / max_chunk_bytes))


def _parts(index: int, cap: Capture, codec: str, max_chunk_bytes: int):
    """Yield the header, then (chunk without data, data) per chunk."""
    views = {name: le_bytes(array) for name, array in cap.tensors.items()}
    yield pb.ExampleHeader(
        index=index,
        tokens=cap.tokens,
        sentence_b_start=cap.sentence_b_start,
        layers=cap.layers,
        heads=cap.heads,
        tensors=list(views),
        chunk_count=sum(_pieces(len(v), max_chunk_bytes) for v in views.values()),
        precision=PRECISION_TO_PB[cap.precision],
        truncated=cap.truncated,
        kv_heads=cap.kv_heads,
        query_positions=cap.query_positions or (),
        key_positions=cap.key_positions or (),
    )
    datatype = DATATYPES[cap.dtype]
    for name, view in views.items():
        scale, offset = cap.quantization.get(name, (0.0, 0.0))
        shape = cap.tensors[name].shape
        total = len(view)
        for k in range(_pieces(total, max_chunk_bytes)):
            piece = view[k * max_chunk_bytes : (k + 1) * max_chunk_bytes]
            data, used = piece, "none"
            if codec != "none":
                packed = compress(piece, codec)
                if len(packed) < len(piece):
                    data, used = packed, codec
            meta = pb.TensorChunk(
                example_index=index,
                tensor=name,
                datatype=datatype,
                shape=shape,
                codec=CODEC_TO_PB[used],
                scale=scale,
                offset=offset,
                byte_offset=k * max_chunk_bytes,
                byte_length=len(piece),
                total_bytes=total,
                crc32=checksum(piece),
            )
            yield meta, data


def chunk_example(
    index: int, cap: Capture, *, codec: str, max_chunk_bytes: int
) -> Iterator[pb.CaptureResponse]:
    """Yield the CaptureResponse messages of one example: its header, then its chunks."""
    parts = _parts(index, cap, codec, max_chunk_bytes)
    yield pb.CaptureResponse(header=next(parts))
    for meta, data in parts:
        meta.data = bytes(data)
        yield pb.CaptureResponse(chunk=meta)


def serialize_example(
    index: int, cap: Capture, *, codec: str, max_chunk_bytes: int
) -> Iterator[bytes]:
    """Like `chunk_example`, but yield the serialised messages, copying each piece once.

    The bytes are exactly what protobuf would write for the same messages
    (fields in number order, `data` last), so any client parses them.
    """
    parts = _parts(index, cap, codec, max_chunk_bytes)
    yield protowire.frame_header(next(parts).SerializeToString())
    for meta, data in parts:
        yield protowire.frame_chunk(meta.SerializeToString(), data)
