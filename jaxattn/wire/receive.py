"""Receiving (the client side): a Capture response stream -> one `Capture` per example.

`StreamDecoder` consumes the stream's messages in order, either parsed or as
received bytes (`feed_all`, which finds each chunk's data in the buffer instead
of copying it out), one item per message or several (a coalesced stream),
checks every chunk against the protocol (attention.proto) and its CRC-32, and
returns each example's Capture once its last chunk has arrived and is decoded.
A tensor that came in one uncompressed chunk is a numpy view of the received
message (no copy) where its items are aligned; the others are reassembled by
one copy into a buffer of their own (zstd decodes straight into it).

Chunks are decoded as they are taken, large ones on the shared codec pool's
threads (`codec_pool.start`: zstd and lz4 release the GIL), while the caller
reads the next message: an example's chunks, and the examples of a coalesced
message, decode side by side, and the decoder waits for them only when it
returns the example.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from jaxattn.capture import Capture, frozen
from jaxattn.capture.shapes import layout_problem
from jaxattn.continuations import STOPS
from jaxattn.errors import UsageError
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import codec_pool, protowire
from jaxattn.wire.codecs import (
    DATATYPE_TO_DTYPE,
    PB_TO_CODEC,
    ChecksumError,
    WireError,
    checksum,
    decompress,
    decompress_into,
    precision_name,
    wire_dtype,
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
        self.key = (chunk.datatype, self.shape, chunk.total_bytes, chunk.scale, chunk.offset)
        expected = math.prod(self.shape) * wire_dtype(self.dtype).itemsize
        if chunk.total_bytes != expected:
            raise WireError(
                f"tensor {chunk.tensor!r}: total_bytes {chunk.total_bytes} does not match "
                f"shape {list(self.shape)} of {chunk.datatype} ({expected} bytes)"
            )
        self.scale, self.offset = chunk.scale, chunk.offset
        self.nbytes = expected
        self.buffer: np.ndarray | None = None  # made by the first chunk
        self.filled = 0

    def place(self, chunk: pb.TensorChunk, data) -> codec_pool.Job:
        """Check the chunk's place in the tensor and start decoding it into it (on the
        codec pool where it is large): a Job of None, or of the tensor's buffer where
        its one chunk is kept where it decoded (the received message, lz4's bytes);
        its exception the WireError of a chunk that does not decode to the bytes
        and CRC-32 it announces."""
        key = (chunk.datatype, tuple(chunk.shape), chunk.total_bytes, chunk.scale, chunk.offset)
        if key != self.key:
            raise WireError(f"tensor {chunk.tensor!r}: chunks disagree on datatype/shape/scale")
        if chunk.byte_offset != self.filled:
            raise WireError(
                f"tensor {chunk.tensor!r}: chunk at byte {chunk.byte_offset}, expected "
                f"{self.filled} (chunks must be contiguous and in order)"
            )
        end = chunk.byte_offset + chunk.byte_length
        if end > self.nbytes:
            raise WireError(f"tensor {chunk.tensor!r}: chunk ends past total_bytes")
        codec = PB_TO_CODEC.get(chunk.codec)
        if codec is None:
            raise WireError(f"tensor {chunk.tensor!r}: unknown codec {chunk.codec}")
        if codec == "none":
            data = np.frombuffer(data, np.uint8)
        whole = chunk.byte_offset == 0 and end == self.nbytes > 0
        if whole and (codec == "lz4" or (codec == "none" and _aligned(data, self.dtype))):
            out = None  # the whole tensor in one chunk: read where it is decoded, no copy
        elif chunk.byte_length == 0:
            out = _EMPTY
        else:
            if self.buffer is None:
                self.buffer = self._allocate(chunk.tensor)
            out = self.buffer[chunk.byte_offset : end]
        self.filled = end
        # Where it is, for the words of a CRC-32 mismatch (made only then).
        where = (chunk.tensor, chunk.example_index, chunk.byte_offset, end)
        job = (data, codec, out, chunk.byte_length, chunk.crc32, where, self.dtype)
        # An uncompressed chunk's copy and CRC-32 (~10 GB/s) never pay for the hand-off.
        least = math.inf if codec == "none" else codec_pool.DECODE_MIN
        return codec_pool.start(_decode, *job, size=chunk.byte_length, least=least)

    def _allocate(self, tensor: str) -> np.ndarray:
        """The tensor's buffer (every byte is written before use), or a WireError where
        its announced size is more than this machine holds (a hostile server?)."""
        try:
            return np.empty(self.nbytes, np.uint8)
        except (MemoryError, ValueError):
            raise WireError(
                f"tensor {tensor!r}: shape {list(self.shape)} ({self.nbytes} bytes) is "
                "more than this client can hold"
            ) from None

    @property
    def complete(self) -> bool:
        return self.filled == self.nbytes

    def array(self) -> np.ndarray:
        """The tensor, read-only (as the engine's): a view of the received message
        where its one chunk came uncompressed and aligned, else of its own buffer."""
        buffer = _EMPTY if self.buffer is None else self.buffer  # None: a tensor of no bytes
        arr = buffer.view(wire_dtype(self.dtype)).reshape(self.shape)
        arr = arr.astype(arr.dtype.newbyteorder("="), copy=False)
        arr.flags.writeable = False
        return arr


_EMPTY = np.empty(0, np.uint8)


def _decode(data, codec: str, out, length: int, crc32: int, where: tuple, dtype: str):
    """Decode one chunk into `out`, its bytes of the tensor's buffer, and check its
    CRC-32 (a ChecksumError naming `where`, (tensor, example, first byte, end), if it
    differs); where `out` is None (the whole tensor in one chunk), return what it
    decoded to as the tensor's buffer."""
    if codec == "none" or out is None:
        decoded = np.frombuffer(decompress(data, codec, length), np.uint8)
    else:
        decompress_into(data, codec, out)
        decoded = out
    crc = checksum(decoded)
    if crc != crc32:
        tensor, example, lo, end = where
        raise ChecksumError(
            f"tensor {tensor!r} of example {example}: CRC-32 mismatch in bytes {lo}..{end} "
            f"(got {crc:#010x}, chunk says {crc32:#010x})"
        )
    if out is None:
        return decoded if _aligned(decoded, dtype) else decoded.copy()
    if codec == "none":
        out[:] = decoded
    return None


def _aligned(data: np.ndarray, dtype: str) -> bool:
    """Whether an array of `dtype` may start at `data`'s first byte (numpy and the
    libraries it feeds expect items at multiples of their size)."""
    return data.__array_interface__["data"][0] % wire_dtype(dtype).itemsize == 0


class StreamDecoder:
    """Rebuilds Captures from a Capture response stream, one message at a time.

        decoder = StreamDecoder()
        for message in call:
            for cap in decoder.feed_all(message):  # the examples it completes
                ...
        decoder.finish()                     # raises if the stream ended mid-example

    Each chunk is decoded as it is taken, a large one on the codec pool's threads
    while the caller reads the next message (`codec_pool.start`); `feed_all`
    waits for an example's chunks when it returns the example. A chunk that does
    not decode (a corrupt frame, a CRC-32 mismatch) raises in the call that would
    have returned its example, or in `finish`, or before any later problem the
    stream has, whichever comes first: the same error whether it was decoded
    here or on the pool, every example before it returned.

    Args:
      texts: the request's texts in order (strings or (a, b) pairs): each
        Capture's `text` is texts[header.index]; None leaves `text` None.
      provenance: every Capture's `provenance` (read-only mapping), or None.

    Attributes:
      wire_bytes: chunk payload bytes received so far (compressed sizes).

    Raises (from feed, feed_bytes, feed_all, finish):
      ChecksumError: a chunk's decoded bytes do not match its CRC-32.
      WireError: any other breach of the protocol.
    """

    def __init__(self, texts: Sequence | None = None, provenance: Mapping | None = None):
        self.texts = texts
        self.provenance = frozen(provenance)
        self.header: pb.ExampleHeader | None = None
        self.tensors: dict[str, _Tensor] = {}
        self.jobs: list[tuple[_Tensor, codec_pool.Job]] = []  # the open example's chunks
        self.chunks = 0
        self.next_index = 0
        self.wire_bytes = 0
        self._completed: list[tuple] = []  # examples the message being taken completes

    def feed(self, message: pb.CaptureResponse) -> Capture | None:
        """Take the next parsed message; return the example's Capture once it is complete.

        A coalesced message (`items`) that completes more than one example is a
        WireError here: read such streams with `feed_all`."""
        return _one(self.feed_all(message))

    def feed_bytes(self, buf: bytes) -> Capture | None:
        """Take the next message as received bytes (a serialised CaptureResponse);
        as `feed`, one example at most."""
        return _one(self.feed_all(buf))

    def feed_all(self, message: pb.CaptureResponse | bytes) -> list[Capture]:
        """Take the next message, parsed or as received bytes (a serialised
        CaptureResponse of one item or a coalesced one, whose chunks' data is read in
        place); return the Captures of the examples it completes, in order, each
        once its chunks are decoded (every item of the message is taken first, so
        the chunks of all its examples decode side by side)."""
        self._completed, problem = [], None
        try:
            self._take(message)
        except WireError as e:
            problem = e
        done, self._completed = self._completed, []
        if problem is not None:
            # A chunk before the problem that did not decode is the stream's first.
            _raise_failure([job for *_, jobs, _ in done for job in jobs] + self.jobs)
            raise problem
        return [self._capture(*example) for example in done]

    def _take(self, message: pb.CaptureResponse | bytes) -> None:
        if isinstance(message, pb.CaptureResponse):
            self._items(message)
            return
        split = protowire.split_items(message)
        if split is None:  # not the common shape: parse it the ordinary way
            try:
                parsed = pb.CaptureResponse.FromString(message)
            except Exception as e:  # google.protobuf.message.DecodeError
                raise WireError(f"an unparsable CaptureResponse: {e}") from None
            self._items(parsed)
            return
        for kind, fields, data in split:
            try:
                if kind == "header":
                    self._header(pb.ExampleHeader.FromString(fields))
                else:
                    self._chunk(pb.TensorChunk.FromString(fields), data)
            except (WireError, UsageError):  # a bad $JAXATTN_CODEC_THREADS: the caller's
                raise
            except Exception as e:
                raise WireError(f"an unparsable {kind}: {e}") from None

    def _items(self, message: pb.CaptureResponse) -> None:
        kind = message.WhichOneof("item")
        if message.items:
            if kind is not None:
                raise WireError(f"a CaptureResponse with both a {kind} and items")
            items = message.items
        else:
            items = [message]
        for item in items:
            kind = item.WhichOneof("item")
            if item.items:
                raise WireError("a coalesced CaptureResponse with items inside an item")
            if kind == "header":
                self._header(item.header)
            elif kind == "chunk":
                self._chunk(item.chunk, item.chunk.data)
            else:
                raise WireError("a CaptureResponse with neither header nor chunk")

    def finish(self) -> None:
        """Check the stream did not end in the middle of an example."""
        if self.header is not None:
            _raise_failure(self.jobs)  # one of its chunks that did not decode comes first
            raise WireError(
                f"the stream ended with example {self.header.index} incomplete "
                f"({self.chunks} of {self.header.chunk_count} chunks)"
            )

    def close(self) -> None:
        """Drop the open example's chunks not being decoded yet (a stream cut or
        abandoned part-way): their pool slots come back now; those under way finish
        on their own. Feeding on after this is an error."""
        for _, job in self.jobs:
            job.cancel()

    def _header(self, header: pb.ExampleHeader) -> None:
        if self.header is not None:
            raise WireError(f"example {header.index} started before {self.header.index} ended")
        if header.index != self.next_index:
            raise WireError(f"example {header.index} arrived, expected {self.next_index}")
        if not header.tensors or header.chunk_count < len(header.tensors):
            raise WireError(f"example {header.index}: a header announcing no or too few chunks")
        _check_layout(header, {})
        self.header, self.tensors, self.jobs, self.chunks = header, {}, [], 0

    def _chunk(self, chunk: pb.TensorChunk, data) -> None:
        header = self.header
        if header is None or chunk.example_index != header.index:
            raise WireError(f"a chunk of example {chunk.example_index} outside its example")
        if chunk.tensor not in header.tensors:
            raise WireError(f"example {header.index}: unannounced tensor {chunk.tensor!r}")
        self.wire_bytes += len(data)
        if chunk.tensor not in self.tensors:
            tensor = _Tensor(chunk)  # its shape checked before any buffer is made for it
            _check_layout(
                header,
                {**{n: t.shape for n, t in self.tensors.items()}, chunk.tensor: tensor.shape},
            )
            self.tensors[chunk.tensor] = tensor
        tensor = self.tensors[chunk.tensor]
        self.jobs.append((tensor, tensor.place(chunk, data)))
        self.chunks += 1
        if self.chunks == header.chunk_count:
            self._complete()

    def _complete(self) -> None:
        """The example's last chunk has come: check it whole, and keep it (its chunks
        still decoding, maybe) for `feed_all` to return."""
        header, tensors = self.header, self.tensors
        missing = [n for n in header.tensors if n not in tensors or not tensors[n].complete]
        if missing:
            raise WireError(f"example {header.index}: tensors {missing} incomplete")
        dtypes = {t.dtype for t in tensors.values()}
        if len(dtypes) != 1:
            raise WireError(f"example {header.index}: mixed datatypes {sorted(dtypes)}")
        self._completed.append((header, tensors, self.jobs, dtypes.pop()))
        self.header, self.tensors, self.jobs = None, {}, []
        self.next_index += 1

    def _capture(self, header: pb.ExampleHeader, tensors: dict, jobs: list, dtype: str) -> Capture:
        """An example's Capture, once its chunks are decoded (the first that did not
        raises its error)."""
        for tensor, job in jobs:
            buffer = job.result()
            if buffer is not None:  # the whole tensor, where its one chunk decoded
                tensor.buffer = buffer
        quant = {}
        if dtype == "uint8":
            quant = {n: (t.scale, t.offset) for n, t in tensors.items()}
        return Capture(
            tokens=tuple(header.tokens),
            sentence_b_start=(
                header.sentence_b_start if header.HasField("sentence_b_start") else None
            ),
            layers=tuple(header.layers),
            heads=tuple(header.heads),
            kv_heads=tuple(header.kv_heads),
            dtype=dtype,
            tensors={n: tensors[n].array() for n in header.tensors},
            quantization=quant,
            precision=precision_name(header.precision),
            text=self._text(header.index),
            truncated=header.truncated,
            generated_start=(
                header.generated_start if header.HasField("generated_start") else None
            ),
            stop=header.stop if header.HasField("stop") else None,  # an older server: None
            provenance=self.provenance,
            query_positions=tuple(header.query_positions) or None,
            key_positions=tuple(header.key_positions) or None,
        )

    def _text(self, index: int):
        if self.texts is None or index >= len(self.texts):
            return None
        text = self.texts[index]
        return text if isinstance(text, str) else tuple(text)


def _raise_failure(jobs: list[tuple[_Tensor, codec_pool.Job]]) -> None:
    """Raise the error of the first of `jobs` (in stream order) that did not decode,
    waiting for those under way; nothing where all did."""
    for _, job in jobs:
        if not job.cancelled():
            job.result()


def stream_weights(message: pb.CaptureResponse | bytes) -> str:
    """The weights fingerprint a Capture stream's first message names in its first
    ExampleHeader (ExampleHeader.weights, CaptureRequest.weights_in_header), parsed
    or as received bytes; "" where it names none (a server that predates the field,
    or one that sent the initial metadata instead) or is no header: the decoder says
    what is wrong with such a message."""
    if not isinstance(message, pb.CaptureResponse):
        item = protowire.first_item(message)
        if item is not None:
            kind, fields, _ = item
            try:
                return pb.ExampleHeader.FromString(fields).weights if kind == "header" else ""
            except Exception:  # google.protobuf.message.DecodeError: the decoder's to say
                return ""
        try:
            message = pb.CaptureResponse.FromString(message)
        except Exception:
            return ""
    first = message.items[0] if message.items else message
    return first.header.weights if first.HasField("header") else ""


def _one(caps: list[Capture]) -> Capture | None:
    if len(caps) > 1:
        raise WireError(
            f"a coalesced CaptureResponse completed {len(caps)} examples: read it with feed_all"
        )
    return caps[0] if caps else None


def _check_layout(header: pb.ExampleHeader, shapes: dict[str, tuple[int, ...]]) -> None:
    """The header's kv_heads and positions are sound and every tensor announced so far
    has the shape its fields give it (`jaxattn.capture.shapes`)."""
    problem = layout_problem(
        tokens=len(header.tokens),
        layers=len(header.layers),
        heads=len(header.heads),
        kv_heads=tuple(header.kv_heads),
        query_positions=tuple(header.query_positions) or None,
        key_positions=tuple(header.key_positions) or None,
        shapes=shapes,
    )
    if problem:
        raise WireError(f"example {header.index}: {problem}")
    start, count = header.generated_start, len(header.tokens)
    if header.HasField("generated_start") and not 1 <= start <= count:
        raise WireError(
            f"example {header.index}: generated_start {start} is outside its {count} "
            f"tokens (1..{count})"
        )
    if header.HasField("stop"):
        if header.stop not in STOPS:
            raise WireError(
                f"example {header.index}: unknown stop {header.stop[:60]!r}; expected one of "
                f"{', '.join(STOPS)}"
            )
        if not header.HasField("generated_start"):
            raise WireError(
                f"example {header.index}: stop {header.stop!r} without a generated_start "
                "(a stop is a continuation's)"
            )
