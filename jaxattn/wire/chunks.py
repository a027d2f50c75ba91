"""One example <-> its header and tensor chunks (the Capture response stream).

`encode_example` is the server side: a `Capture` becomes one ExampleHeader and
its TensorChunks, compressed lazily as gRPC pulls them. `StreamDecoder` is the
client side: it consumes CaptureResponse messages in order and returns each
example's `Capture` once its last chunk has arrived, checking every chunk
against the protocol (attention.proto) and its CRC-32 on the way.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from jaxattn.capture import Capture
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire.codecs import (
    CODEC_TO_PB,
    DATATYPE_TO_DTYPE,
    DATATYPES,
    PB_TO_CODEC,
    ChecksumError,
    WireError,
    checksum,
    compress,
    decompress,
    le_bytes,
    wire_dtype,
)


def _pieces(nbytes: int, max_chunk_bytes: int) -> int:
    return max(1, math.ceil(nbytes / max_chunk_bytes))


def encode_example(
    index: int, cap: Capture, *, codec: str, max_chunk_bytes: int
) -> Iterator[pb.CaptureResponse]:
    """Yield the header, then every chunk, of one example.

    Each tensor is cut into pieces of at most `max_chunk_bytes` decoded bytes and
    each piece is compressed on its own; a piece that does not shrink is sent as
    CODEC_NONE, so no chunk's data ever exceeds `max_chunk_bytes`.
    """
    views = {name: le_bytes(array) for name, array in cap.tensors.items()}
    yield pb.CaptureResponse(
        header=pb.ExampleHeader(
            index=index,
            tokens=cap.tokens,
            sentence_b_start=cap.sentence_b_start,
            layers=cap.layers,
            heads=cap.heads,
            tensors=list(views),
            chunk_count=sum(_pieces(len(v), max_chunk_bytes) for v in views.values()),
        )
    )
    datatype = DATATYPES[cap.dtype]
    for name, view in views.items():
        scale, offset = cap.quantization.get(name, (0.0, 0.0))
        shape = cap.tensors[name].shape
        total = len(view)
        for k in range(_pieces(total, max_chunk_bytes)):
            piece = view[k * max_chunk_bytes : (k + 1) * max_chunk_bytes]
            data, used = compress(piece, codec), codec
            if used != "none" and len(data) >= len(piece):
                data, used = bytes(piece), "none"
            yield pb.CaptureResponse(
                chunk=pb.TensorChunk(
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
                    data=data,
                )
            )


class _Tensor:
    """One tensor being reassembled."""

    def __init__(self, chunk: pb.TensorChunk):
        if chunk.datatype not in DATATYPE_TO_DTYPE:
            raise WireError(
                f"tensor {chunk.tensor!r}: unknown datatype {chunk.datatype!r}; "
                f"expected one of {', '.join(DATATYPE_TO_DTYPE)}"
            )
        self.dtype = DATATYPE_TO_DTYPE[chunk.datatype]
        self.shape = tuple(int(d) for d in chunk.shape)
        expected = math.prod(self.shape) * wire_dtype(self.dtype).itemsize
        if chunk.total_bytes != expected:
            raise WireError(
                f"tensor {chunk.tensor!r}: total_bytes {chunk.total_bytes} does not match "
                f"shape {list(self.shape)} of {chunk.datatype} ({expected} bytes)"
            )
        self.first = chunk
        self.buffer = bytearray(expected)
        self.filled = 0

    def add(self, chunk: pb.TensorChunk) -> None:
        first = self.first
        if (chunk.datatype, tuple(chunk.shape), chunk.total_bytes) != (
            first.datatype,
            tuple(first.shape),
            first.total_bytes,
        ) or (chunk.scale, chunk.offset) != (first.scale, first.offset):
            raise WireError(f"tensor {chunk.tensor!r}: chunks disagree on datatype/shape/scale")
        if chunk.byte_offset != self.filled:
            raise WireError(
                f"tensor {chunk.tensor!r}: chunk at byte {chunk.byte_offset}, expected "
                f"{self.filled} (chunks must be contiguous and in order)"
            )
        end = chunk.byte_offset + chunk.byte_length
        if end > len(self.buffer):
            raise WireError(f"tensor {chunk.tensor!r}: chunk ends past total_bytes")
        codec = PB_TO_CODEC.get(chunk.codec)
        if codec is None:
            raise WireError(f"tensor {chunk.tensor!r}: unknown codec {chunk.codec}")
        data = decompress(chunk.data, codec, chunk.byte_length)
        if checksum(data) != chunk.crc32:
            raise ChecksumError(
                f"tensor {chunk.tensor!r} of example {chunk.example_index}: CRC-32 mismatch "
                f"in bytes {chunk.byte_offset}..{end} (got {checksum(data):#010x}, "
                f"chunk says {chunk.crc32:#010x})"
            )
        self.buffer[chunk.byte_offset : end] = data
        self.filled = end

    @property
    def complete(self) -> bool:
        return self.filled == len(self.buffer)

    def array(self) -> np.ndarray:
        arr = np.frombuffer(self.buffer, dtype=wire_dtype(self.dtype)).reshape(self.shape)
        return arr.astype(arr.dtype.newbyteorder("="), copy=False)


class StreamDecoder:
    """Rebuilds Captures from a Capture response stream, one message at a time.

        decoder = StreamDecoder()
        for message in call:
            cap = decoder.feed(message)      # a Capture when an example completes
        decoder.finish()                     # raises if the stream ended mid-example

    Raises (from feed/finish):
      ChecksumError: a chunk's decoded bytes do not match its CRC-32.
      WireError: any other breach of the protocol.
    """

    def __init__(self):
        self.header: pb.ExampleHeader | None = None
        self.tensors: dict[str, _Tensor] = {}
        self.chunks = 0
        self.next_index = 0
        self.wire_bytes = 0

    def feed(self, message: pb.CaptureResponse) -> Capture | None:
        """Take the next message; return the example's Capture once it is complete."""
        kind = message.WhichOneof("item")
        if kind == "header":
            return self._header(message.header)
        if kind == "chunk":
            return self._chunk(message.chunk)
        raise WireError("a CaptureResponse with neither header nor chunk")

    def finish(self) -> None:
        """Check the stream did not end in the middle of an example."""
        if self.header is not None:
            raise WireError(
                f"the stream ended with example {self.header.index} incomplete "
                f"({self.chunks} of {self.header.chunk_count} chunks)"
            )

    def _header(self, header: pb.ExampleHeader) -> Capture | None:
        if self.header is not None:
            raise WireError(f"example {header.index} started before {self.header.index} ended")
        if header.index != self.next_index:
            raise WireError(f"example {header.index} arrived, expected {self.next_index}")
        if not header.tensors or header.chunk_count < len(header.tensors):
            raise WireError(f"example {header.index}: a header announcing no or too few chunks")
        self.header, self.tensors, self.chunks = header, {}, 0
        return None

    def _chunk(self, chunk: pb.TensorChunk) -> Capture | None:
        header = self.header
        if header is None or chunk.example_index != header.index:
            raise WireError(f"a chunk of example {chunk.example_index} outside its example")
        if chunk.tensor not in header.tensors:
            raise WireError(f"example {header.index}: unannounced tensor {chunk.tensor!r}")
        self.wire_bytes += len(chunk.data)
        if chunk.tensor not in self.tensors:
            self.tensors[chunk.tensor] = _Tensor(chunk)
        self.tensors[chunk.tensor].add(chunk)
        self.chunks += 1
        if self.chunks < header.chunk_count:
            return None
        return self._complete()

    def _complete(self) -> Capture:
        header, tensors = self.header, self.tensors
        missing = [n for n in header.tensors if n not in tensors or not tensors[n].complete]
        if missing:
            raise WireError(f"example {header.index}: tensors {missing} incomplete")
        dtypes = {t.dtype for t in tensors.values()}
        if len(dtypes) != 1:
            raise WireError(f"example {header.index}: mixed datatypes {sorted(dtypes)}")
        dtype = dtypes.pop()
        quant = {}
        if dtype == "uint8":
            quant = {n: (t.first.scale, t.first.offset) for n, t in tensors.items()}
        cap = Capture(
            tokens=tuple(header.tokens),
            sentence_b_start=(
                header.sentence_b_start if header.HasField("sentence_b_start") else None
            ),
            layers=tuple(header.layers),
            heads=tuple(header.heads),
            dtype=dtype,
            tensors={n: tensors[n].array() for n in header.tensors},
            quantization=quant,
        )
        self.header, self.tensors = None, {}
        self.next_index += 1
        return cap
