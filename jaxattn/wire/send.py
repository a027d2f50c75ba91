"""Sending (the server side): one example's `Capture` -> its header and tensor chunks.

Each tensor is cut into pieces of at most `max_chunk_bytes` decoded bytes and
each piece is compressed on its own; a piece that does not shrink is sent as
CODEC_NONE, so no chunk's data ever exceeds `max_chunk_bytes`. Pieces are
compressed lazily, as gRPC pulls the next message. `serialize_example` copies
uncompressed data once, from the tensor into its message.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

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
    little_endian,
)

# Below this a chunk is framed with one join (its copies cost nothing); above,
# its data is copied once, straight from the tensor into the message.
IN_PLACE_MIN = 64 << 10


def _pieces(nbytes: int, max_chunk_bytes: int) -> int:
    return max(1, math.ceil(nbytes / max_chunk_bytes))


def byte_rows(array: np.ndarray) -> np.ndarray | None:
    """The array's little-endian bytes as a uint8 array of the same layout (its last
    axis `itemsize` times longer), a view wherever the last axis is contiguous
    (the engine's trimmed captures are); None where it is not."""
    array = little_endian(array)
    if array.ndim == 0:
        array = array.reshape(1)
    if array.shape[-1] > 1 and array.strides[-1] != array.itemsize:
        return None
    return array.view(np.uint8)


def copy_range(src: np.ndarray, start: int, stop: int, out: np.ndarray) -> None:
    """out[:] = src.reshape(-1)[start:stop] (C order), without making src contiguous:
    whole sub-blocks in one numpy copy each, the partial ones at the ends recursively."""
    if stop <= start:
        return
    if src.ndim <= 1:
        out[:] = src[start:stop]
        return
    inner = math.prod(src.shape[1:])
    i0, r0 = divmod(start, inner)
    i1, r1 = divmod(stop, inner)
    if i0 == i1:  # inside one sub-block
        copy_range(src[i0], r0, r1, out)
        return
    pos = 0
    if r0:
        copy_range(src[i0], r0, inner, out[: inner - r0])
        pos, i0 = inner - r0, i0 + 1
    if i1 > i0:
        n = (i1 - i0) * inner
        np.copyto(out[pos : pos + n].reshape((i1 - i0, *src.shape[1:])), src[i0:i1])
        pos += n
    if r1:
        copy_range(src[i1], 0, r1, out[pos:])


def _header(index: int, cap: Capture, sizes: dict[str, int], max_chunk_bytes: int, weights: str):
    return pb.ExampleHeader(
        index=index,
        tokens=cap.tokens,
        sentence_b_start=cap.sentence_b_start,
        layers=cap.layers,
        heads=cap.heads,
        tensors=list(sizes),
        chunk_count=sum(_pieces(n, max_chunk_bytes) for n in sizes.values()),
        precision=PRECISION_TO_PB[cap.precision],
        truncated=cap.truncated,
        kv_heads=cap.kv_heads,
        query_positions=cap.query_positions or (),
        key_positions=cap.key_positions or (),
        weights=weights,
    )


def _meta(index, name, cap, datatype, lo, hi, total, used, crc) -> pb.TensorChunk:
    scale, offset = cap.quantization.get(name, (0.0, 0.0))
    return pb.TensorChunk(
        example_index=index,
        tensor=name,
        datatype=datatype,
        shape=cap.tensors[name].shape,
        codec=CODEC_TO_PB[used],
        scale=scale,
        offset=offset,
        byte_offset=lo,
        byte_length=hi - lo,
        total_bytes=total,
        crc32=crc,
    )


def parts(
    index: int,
    cap: Capture,
    codec: str,
    max_chunk_bytes: int,
    in_place: bool = False,
    weights: str = "",
):
    """Yield the header, then (chunk, data) per chunk: `data` the piece's bytes to
    frame after the chunk's other fields, or None where `in_place` chose to copy
    the piece from the tensor straight into its message (the chunk's crc32 then
    a stand-in: `framed_in_place` computes it). `weights`: the header's weights
    fingerprint (ExampleHeader.weights: a stream's first header only)."""
    rows = {
        n: byte_rows(a) if in_place and codec == "none" else None for n, a in cap.tensors.items()
    }
    flat = {n: None if rows[n] is not None else le_bytes(a) for n, a in cap.tensors.items()}
    sizes = {n: len(flat[n]) if rows[n] is None else rows[n].size for n in cap.tensors}
    yield _header(index, cap, sizes, max_chunk_bytes, weights)
    datatype = DATATYPES[cap.dtype]
    for name, total in sizes.items():
        for k in range(_pieces(total, max_chunk_bytes)):
            lo, hi = k * max_chunk_bytes, min(total, (k + 1) * max_chunk_bytes)
            if rows[name] is not None and hi - lo >= IN_PLACE_MIN:
                # Any nonzero CRC takes the same 5 bytes: a stand-in until the copy.
                yield _meta(index, name, cap, datatype, lo, hi, total, "none", 1), None
                continue
            if flat[name] is None:  # a small last piece of an in-place tensor
                flat[name] = le_bytes(cap.tensors[name])
            piece = flat[name][lo:hi]
            data, used = piece, "none"
            if codec != "none":
                packed = compress(piece, codec)
                if len(packed) < len(piece):
                    data, used = packed, codec
            yield _meta(index, name, cap, datatype, lo, hi, total, used, checksum(piece)), data


def chunk_example(
    index: int, cap: Capture, *, codec: str, max_chunk_bytes: int, weights: str = ""
) -> Iterator[pb.CaptureResponse]:
    """Yield the CaptureResponse messages of one example: its header (with `weights`,
    ExampleHeader.weights), then its chunks."""
    items = parts(index, cap, codec, max_chunk_bytes, weights=weights)
    yield pb.CaptureResponse(header=next(items))
    for meta, data in items:
        meta.data = bytes(data)
        yield pb.CaptureResponse(chunk=meta)


def serialize_example(
    index: int, cap: Capture, *, codec: str, max_chunk_bytes: int, weights: str = ""
) -> Iterator[bytes]:
    """Like `chunk_example`, but yield the serialised messages, copying each piece once.

    With codec none, a piece of at least 64 KiB goes from the tensor (a strided
    view of its batch, as the engine gives it) straight into its message: one
    copy of its bytes, its CRC-32 computed there. Smaller and compressed pieces
    are framed around a contiguous piece (a strided tensor is made contiguous
    once; a compressed piece's bytes are copied once into the message).
    The bytes are exactly what protobuf would write for the same messages
    (fields in number order, `data` last), so any client parses them.
    """
    items = parts(index, cap, codec, max_chunk_bytes, in_place=True, weights=weights)
    yield protowire.frame_header(next(items).SerializeToString())
    for meta, data in items:
        if data is None:
            yield framed_in_place(meta, cap.tensors[meta.tensor])
        else:
            yield protowire.frame_chunk(meta.SerializeToString(), data)


def framed_in_place(meta: pb.TensorChunk, tensor: np.ndarray) -> bytes:
    """The chunk's message, its data copied from the tensor into it and checksummed there."""
    lo = meta.byte_offset
    message, head, data = protowire.chunk_frame(meta.SerializeToString(), meta.byte_length)
    copy_range(byte_rows(tensor), lo, lo + meta.byte_length, data)
    meta.crc32 = checksum(data)
    if meta.crc32 == 0:  # protobuf leaves a zero out: a head 5 bytes shorter
        return protowire.frame_chunk(meta.SerializeToString(), data)
    head[:] = np.frombuffer(meta.SerializeToString(), np.uint8)
    return message
