"""Sending coalesced: consecutive items of a Capture stream packed into fewer messages.

A plain stream sends one item (an ExampleHeader or a TensorChunk) per message.
grpc-python sends one message at a time per call and waits for each, so a
full capture's ~7 items per example cost ~7 waits; where the request sets
CaptureRequest.coalesce, `serialize_coalesced` packs consecutive items into
one CaptureResponse{items: [...]} of at most the request's max_chunk_bytes
serialised (an item that does not fit beside others goes alone, as in the
plain stream, so no message is larger than a plain stream's largest).

What a message holds is bounded as the plain stream's pieces are, and items
are framed only as the previous message is taken (lazily, as gRPC pulls).
Across an example's end it packs on only when the next example is computed
already (`ready`), never waiting for one with items in hand, and only when
what it holds of the finished example is small (copied out, so the example's
buffer is not kept alive past the server's accounting of it: the flow control
of service/admitted_call.py). Data that goes from the tensor straight into the
message (uncompressed pieces of 64 KiB and more) is copied once, as in
`serialize_example`, and its CRC-32 computed there; each chunk's data starts
16-aligned in the whole message.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from jaxattn.capture import Capture
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import protowire
from jaxattn.wire.codecs import checksum
from jaxattn.wire.send import (
    IN_PLACE_MIN,
    Compressor,
    byte_rows,
    copy_range,
    framed_in_place,
    parts,
    whole,
)

# Framing an item may add around its head and data: items, chunk and data
# prefixes (at most 10 bytes each for these sizes) and a padding field (<= 17).
_FRAMING = 48


@dataclasses.dataclass(slots=True)
class _Item:
    head: bytes  # a serialised ExampleHeader, or a chunk's fields but data
    meta: pb.TensorChunk | None = None  # None: a header
    data: object = None  # the chunk's data (bytes-like); None: from `tensor` in place
    tensor: np.ndarray | None = None
    base: int = 0  # where `tensor`'s bytes start in the whole tensor (a CapturePart's share)

    @property
    def data_len(self) -> int | None:
        if self.meta is None:
            return None
        return self.meta.byte_length if self.data is None else len(self.data)

    @property
    def size(self) -> int:
        """An upper bound on the item's serialised size in a coalesced message."""
        return len(self.head) + (self.data_len or 0) + _FRAMING

    @property
    def borrowed(self) -> int:
        """Bytes of an example's tensors this item keeps alive (0 once copied)."""
        if self.meta is None:
            return 0
        if self.data is None:
            return self.meta.byte_length
        return 0 if isinstance(self.data, bytes) else len(self.data)

    def own(self) -> None:
        """Copy the data it borrows from its tensor into bytes of its own."""
        if self.meta is None or isinstance(self.data, bytes):
            return
        if self.data is None:
            lo = self.meta.byte_offset - self.base
            out = np.empty(self.meta.byte_length, np.uint8)
            copy_range(byte_rows(self.tensor), lo, lo + self.meta.byte_length, out)
            self.meta.crc32 = checksum(out)
            self.head = self.meta.SerializeToString()
            self.data, self.tensor = out.tobytes(), None
        else:
            self.data = bytes(self.data)


def _items(
    index: int, cap, codec: str, max_chunk_bytes: int, weights: str, compressor
) -> Iterator[_Item]:
    bases: dict[str, int] = {}  # where each tensor's share starts (asked once a tensor)
    for item in parts(index, cap, codec, max_chunk_bytes, True, weights, compressor):
        if isinstance(item, pb.ExampleHeader):
            yield _Item(item.SerializeToString())
            continue
        meta, data = item
        name = meta.tensor
        base = bases.get(name)
        if base is None:
            base = bases[name] = whole(cap, name)[2]
        tensor = cap.tensors[name] if data is None else None
        yield _Item(meta.SerializeToString(), meta, data, tensor, base)


def _alone(item: _Item) -> bytes:
    """The item as a plain message of its own (what `serialize_example` sends)."""
    if item.meta is None:
        return protowire.frame_header(item.head)
    if item.data is None:
        return framed_in_place(item.meta, item.tensor, item.base)
    return protowire.frame_chunk(item.head, item.data)


def _together(items: list[_Item]) -> bytes:
    """The items as one coalesced message: each piece's data copied once into it."""
    message, regions = protowire.frame_items([(i.head, i.data_len) for i in items])
    for item, region in zip(items, regions, strict=True):
        if region is None:
            continue
        head, data = region
        if item.data is not None:
            data[:] = np.frombuffer(item.data, np.uint8)
            continue
        lo = item.meta.byte_offset - item.base
        copy_range(byte_rows(item.tensor), lo, lo + item.meta.byte_length, data)
        item.meta.crc32 = checksum(data)  # over the bytes in place, as `framed_in_place`
        protowire.rewrite_head(head, item.meta.SerializeToString())
    return message


def serialize_coalesced(
    examples: Iterable[tuple[int, Capture]],
    *,
    codec: str,
    max_chunk_bytes: int,
    ready: Callable[[], bool] = lambda: False,
    weights: str = "",
    peek: Callable[[], object] | None = None,
) -> Iterator[bytes]:
    """The serialised messages of a coalesced stream of `examples` ((index, Capture)
    in stream order): the items `serialize_example` sends, packed into messages of
    at most `max_chunk_bytes` (or one item alone); `weights` goes in the stream's
    first header (ExampleHeader.weights), none in the others.

    `ready()` says whether the next example can be had from `examples` without
    waiting (the server's job has computed it); where it cannot, or where the
    finished example's items held are large, the message in hand goes first.
    `peek()`: the example `examples` yields next where it is computed, else None (the
    server's job): its pieces are compressed while this one's are sent (`Compressor`).
    """
    held: list[_Item] = []
    size = 0
    compressor = Compressor(codec, max_chunk_bytes, peek) if codec != "none" else None

    def flush() -> Iterator[bytes]:
        nonlocal held, size
        if held:
            batch, held, size = held, [], 0
            yield _alone(batch[0]) if len(batch) == 1 else _together(batch)

    try:
        for index, cap in examples:
            for item in _items(index, cap, codec, max_chunk_bytes, weights, compressor):
                if held and size + item.size > max_chunk_bytes:
                    yield from flush()
                held.append(item)
                size += item.size
            if held and (sum(i.borrowed for i in held) > IN_PLACE_MIN or not ready()):
                yield from flush()
            for item in held:  # the next example is here: keep nothing of this one's buffer
                item.own()
            weights = ""  # the first header only
        yield from flush()
    finally:
        if compressor is not None:
            compressor.close()
