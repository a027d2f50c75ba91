"""Sending (the server side): one example's `Capture` -> its header and tensor chunks.

An example the engine ran in layer groups comes as `CapturePart`s: the header with
the first, then each part's chunks as it lands (a layer group's entries of a
tensor are a contiguous byte range of it, the L axis leading), so the server
holds a group at a time, not the example; the client sees the stream it would
have got whole (more chunks, the same bytes at the same offsets).

Each tensor is cut into pieces of at most `max_chunk_bytes` decoded bytes (with
a codec, at most `codec_pool.PIECE_BYTES`) and each piece is compressed on its
own; a piece that does not shrink is sent as CODEC_NONE, so no chunk's data ever
exceeds `max_chunk_bytes`. Pieces are compressed a few ahead of the send, on the
shared pool's threads (`codec_pool`), across a stream's examples (`Compressor`).
`serialize_example` copies uncompressed data once, from the tensor into its message.
"""

from __future__ import annotations

import collections
import math
import types
from collections.abc import Iterator

import numpy as np

from jaxattn.capture import Capture
from jaxattn.capture.part import CapturePart
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import codec_pool, protowire
from jaxattn.wire.codecs import (
    CODEC_TO_PB,
    DATATYPES,
    PRECISION_TO_PB,
    big_endian,
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


def byte_rows(array: np.ndarray, swap: bool = True) -> np.ndarray | None:
    """The array's little-endian bytes as a uint8 array of the same layout (its last
    axis `itemsize` times longer), a view wherever the last axis is contiguous
    (the engine's trimmed captures are); None where it is not, or (`swap` False)
    where its items are big-endian (rather than a byte-swapped copy)."""
    if not swap and big_endian(array.dtype):
        return None
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


def _header(index: int, cap, sizes: dict[str, list[int]], max_chunk_bytes: int, weights: str):
    # sizes: each tensor's bytes in each of the example's parts (one part: the Capture)
    if isinstance(cap, CapturePart):
        cap = types.SimpleNamespace(**cap.fields)
    return pb.ExampleHeader(
        index=index,
        tokens=cap.tokens,
        sentence_b_start=cap.sentence_b_start,
        layers=cap.layers,
        heads=cap.heads,
        tensors=list(sizes),
        chunk_count=sum(_pieces(n, max_chunk_bytes) for ns in sizes.values() for n in ns),
        precision=PRECISION_TO_PB[cap.precision],
        truncated=cap.truncated,
        generated_start=cap.generated_start,  # None: unset (no generation)
        stop=cap.stop,  # None: unset (no generation)
        kv_heads=cap.kv_heads,
        query_positions=cap.query_positions or (),
        key_positions=cap.key_positions or (),
        weights=weights,
    )


def _meta(index, name, cap, datatype, shape, lo, hi, total, used, crc) -> pb.TensorChunk:
    scale, offset = cap.quantization.get(name, (0.0, 0.0))
    return pb.TensorChunk(
        example_index=index,
        tensor=name,
        datatype=datatype,
        shape=shape,
        codec=CODEC_TO_PB[used],
        scale=scale,
        offset=offset,
        byte_offset=lo,
        byte_length=hi - lo,
        total_bytes=total,
        crc32=crc,
    )


def whole(cap, name: str) -> tuple[tuple[int, ...], int, int]:
    """(the whole tensor's shape, its bytes, where `cap`'s share of them starts) of tensor
    `name` of a Capture (all of it) or a `CapturePart` (a contiguous byte range of it)."""
    if isinstance(cap, CapturePart):
        lo, _ = cap.byte_range(name)
        return cap.shape(name), cap.byte_range(name, cap.parts - 1)[1], lo
    t = cap.tensors[name]
    return t.shape, t.nbytes, 0


def parts(
    index: int,
    cap,
    codec: str,
    max_chunk_bytes: int,
    in_place: bool = False,
    weights: str = "",
    compressor: Compressor | None = None,
):
    """Yield the header, then (chunk, data) per chunk: `data` the piece's bytes to
    frame after the chunk's other fields, or None where `in_place` chose to copy
    the piece from the tensor straight into its message (the chunk's crc32 then
    a stand-in: `framed_in_place` computes it). `weights`: the header's weights
    fingerprint (ExampleHeader.weights: a stream's first header only).
    `compressor`: the stream's (`Compressor`, of the same codec and max_chunk_bytes),
    which may have begun this example's pieces already; None: one of its own.

    `cap`: a Capture, or one layer group's `CapturePart` of an example: the header
    comes with the first part (its chunk_count counts every part's chunks), and a
    part's chunks carry the byte range of each whole tensor its layers hold, so
    the receiver reassembles the Capture it would have got whole.
    """
    rows = {
        n: byte_rows(a) if in_place and codec == "none" else None for n, a in cap.tensors.items()
    }
    sizes = {n: a.nbytes for n, a in cap.tensors.items()}
    if codec != "none":  # pieces the pool compresses side by side (one tensor: several)
        max_chunk_bytes = min(max_chunk_bytes, codec_pool.PIECE_BYTES)
    grouped = isinstance(cap, CapturePart)
    if not grouped or cap.first:
        every = {n: [sizes[n]] for n in sizes}
        if grouped:  # every part's bytes, from the example's layer cuts
            every = {
                n: [b - a for a, b in map(cap.byte_range, [n] * cap.parts, range(cap.parts))]
                for n in sizes
            }
        yield _header(index, cap, every, max_chunk_bytes, weights)
    datatype = DATATYPES[cap.dtype]
    if codec != "none":  # compressed on the pool's threads, a few pieces ahead
        own = compressor is None
        if own:
            compressor = Compressor(codec, max_chunk_bytes)
        elif (compressor.codec, compressor.max_chunk_bytes) != (codec, max_chunk_bytes):
            raise RuntimeError("a stream's compressor of another codec or piece size")
        wholes: dict[str, tuple] = {}  # `whole` asked once a tensor, not once a piece
        try:
            for name, lo, hi, (data, used, crc) in compressor.pieces(cap):
                known = wholes.get(name)
                if known is None:
                    known = wholes[name] = whole(cap, name)
                shape, total, base = known
                at = (base + lo, base + hi, total)
                yield _meta(index, name, cap, datatype, shape, *at, used, crc), data
        finally:
            if own:
                compressor.close()
        return
    pieces = (  # (tensor, byte range in the part's share, in the whole tensor)
        (name, lo, hi, *whole(cap, name))
        for name, size in sizes.items()
        for lo, hi in _ranges(size, max_chunk_bytes)
    )
    flat = {n: None if rows[n] is not None else le_bytes(a) for n, a in cap.tensors.items()}
    for name, lo, hi, shape, total, base in pieces:
        at = (base + lo, base + hi, total)
        if rows[name] is not None and hi - lo >= IN_PLACE_MIN:
            # Any nonzero CRC takes the same 5 bytes: a stand-in until the copy.
            yield _meta(index, name, cap, datatype, shape, *at, "none", 1), None
            continue
        if flat[name] is None:  # a small last piece of an in-place tensor
            flat[name] = le_bytes(cap.tensors[name])
        piece = flat[name][lo:hi]
        yield _meta(index, name, cap, datatype, shape, *at, "none", checksum(piece)), piece


class Compressor:
    """A stream's compressed pieces, in order, on the codec pool's threads a few ahead
    (`codec_pool.Stream`), across its examples: where `peek()` gives the example (or
    layer group) the stream sends next, already computed, its pieces are begun while
    this one's are framed and sent, so that the pool is not left idle at each example's
    end waiting for the stream to come back for more (one example ahead at most: its
    bytes are in the job's buffer already). No tensor is copied whole: each piece's
    bytes are copied out of it (a strided view of its batch, as the engine gives it)
    on the pool thread that compresses the piece (`_packed`); only a tensor whose last
    axis is strided, or whose items are big-endian, is made contiguous, and then at its
    example's own `pieces`, never ahead. Its codec and `max_chunk_bytes` (at most
    `PIECE_BYTES`) cut every example; `close` drops what was begun.
    """

    def __init__(self, codec: str, max_chunk_bytes: int, peek=None):
        self.codec = codec
        self.max_chunk_bytes = min(max_chunk_bytes, codec_pool.PIECE_BYTES)
        self._peek = peek
        self._planned: collections.deque = collections.deque()  # (cap, its piece count)
        self._first: list = []  # the pieces of an example `pieces` was given unplanned
        self._stream: codec_pool.Stream | None = None

    def _plan(self, cap, ahead: bool = False) -> list[tuple]:
        """The example's pieces, (its tensor's bytes, codec, name, lo, hi) each: the bytes
        a flat view where the tensor is contiguous, else its `byte_rows` (the piece
        copied out on the pool). `ahead` (a look-ahead): none, the example not planned,
        where a tensor would have to be copied whole (`le_bytes`)."""
        flat = {}
        for name, a in cap.tensors.items():
            rows = byte_rows(a, swap=False)
            if rows is None and ahead:
                return []
            if rows is None:
                flat[name] = le_bytes(a)
            else:
                flat[name] = memoryview(rows.reshape(-1)) if rows.flags.c_contiguous else rows
        pieces = [
            (source, self.codec, name, lo, hi)
            for name, source in flat.items()
            for lo, hi in _ranges(cap.tensors[name].nbytes, self.max_chunk_bytes)
        ]
        self._planned.append((cap, len(pieces)))
        return pieces

    def _more(self) -> list[tuple]:
        """The stream's next pieces to begin: the example given, then the one after it
        where `peek` has it ready; none beyond. A look-ahead that fails begins nothing:
        its example is planned again when it is sent (the error raised there, not
        in the example sent now)."""
        if self._first:
            first, self._first = self._first, []
            return first
        if self._peek is None or len(self._planned) != 1:
            return []
        try:
            following = self._peek()
            if following is None or following is self._planned[0][0]:
                return []
            return self._plan(following, ahead=True)
        except Exception:  # noqa: BLE001 -- raised again when that example is sent
            return []

    def pieces(self, cap) -> Iterator[tuple[str, int, int, tuple]]:
        """(tensor, lo, hi, (data, codec used, crc32)) of each of `cap`'s pieces, in order."""
        if not self._planned or self._planned[0][0] is not cap:
            self.close()  # not the example looked ahead to (or the first): begun anew
            self._stream = codec_pool.Stream(_packed, _piece_bytes, more=self._more)
            self._first = self._plan(cap)
        done = False
        try:
            for _ in range(self._planned[0][1]):
                (_, _, name, lo, hi), result = self._stream.take()
                yield name, lo, hi, result
            self._planned.popleft()
            done = True
        finally:
            if not done:  # left part-way: what was begun is dropped
                self.close()

    def close(self) -> None:
        """Drop the pieces begun ahead (`codec_pool.Stream.close`)."""
        if self._stream is not None:
            self._stream.close()
        self._stream, self._first = None, []
        self._planned.clear()


def _packed(p: tuple) -> tuple:
    """A piece compressed: (its data, the codec used, the CRC-32 of its bytes); sent as
    CODEC_NONE where compressing does not shrink it. A piece of a strided tensor's
    `byte_rows` is copied out of it first (`copy_range`), here on the pool's thread."""
    source, codec, _, lo, hi = p
    if isinstance(source, np.ndarray):
        buf = np.empty(hi - lo, np.uint8)
        copy_range(source, lo, hi, buf)
        piece = memoryview(buf)
    else:
        piece = source[lo:hi]
    out = compress(piece, codec)
    used = codec if len(out) < len(piece) else "none"
    return (out if used == codec else piece), used, checksum(piece)


def _piece_bytes(p: tuple) -> int:
    return p[4] - p[3]


def _ranges(size: int, max_chunk_bytes: int) -> Iterator[tuple[int, int]]:
    for k in range(_pieces(size, max_chunk_bytes)):
        yield k * max_chunk_bytes, min(size, (k + 1) * max_chunk_bytes)


def chunk_example(
    index: int,
    cap: Capture | CapturePart,
    *,
    codec: str,
    max_chunk_bytes: int,
    weights: str = "",
) -> Iterator[pb.CaptureResponse]:
    """Yield the CaptureResponse messages of one example (or one part of it): its
    header (a part: the first only; with `weights`, ExampleHeader.weights), then its
    chunks."""
    for item in parts(index, cap, codec, max_chunk_bytes, weights=weights):
        if isinstance(item, pb.ExampleHeader):
            yield pb.CaptureResponse(header=item)
            continue
        meta, data = item
        meta.data = bytes(data)
        yield pb.CaptureResponse(chunk=meta)


def serialize_example(
    index: int,
    cap: Capture,
    *,
    codec: str,
    max_chunk_bytes: int,
    weights: str = "",
    compressor: Compressor | None = None,
) -> Iterator[bytes]:
    """Like `chunk_example`, but yield the serialised messages, copying each piece once.

    With codec none, a piece of at least 64 KiB goes from the tensor (a strided
    view of its batch, as the engine gives it) straight into its message: one
    copy of its bytes, its CRC-32 computed there. Smaller and compressed pieces
    are framed around a contiguous piece (a strided tensor is made contiguous
    once; a compressed piece's bytes are copied once into the message).
    The bytes are exactly what protobuf would write for the same messages
    (fields in number order, `data` last), so any client parses them. `compressor`:
    the stream's, as `parts` takes it.
    """
    items = parts(index, cap, codec, max_chunk_bytes, True, weights, compressor)
    for item in items:
        if isinstance(item, pb.ExampleHeader):
            yield protowire.frame_header(item.SerializeToString())
            continue
        meta, data = item
        if data is None:
            yield framed_in_place(meta, cap.tensors[meta.tensor], whole(cap, meta.tensor)[2])
        else:
            yield protowire.frame_chunk(meta.SerializeToString(), data)


def framed_in_place(meta: pb.TensorChunk, tensor: np.ndarray, base: int = 0) -> bytes:
    """The chunk's message, its data copied from the tensor into it and checksummed
    there (`tensor` holding the whole tensor's bytes from `base` on: a part's share)."""
    lo = meta.byte_offset - base
    message, head, data = protowire.chunk_frame(meta.SerializeToString(), meta.byte_length)
    copy_range(byte_rows(tensor), lo, lo + meta.byte_length, data)
    meta.crc32 = checksum(data)
    if meta.crc32 == 0:  # protobuf leaves a zero out: a head 5 bytes shorter
        return protowire.frame_chunk(meta.SerializeToString(), data)
    head[:] = np.frombuffer(meta.SerializeToString(), np.uint8)
    return message
