"""Just enough of the protobuf wire format to move chunk bytes without copying them.

A 4 MiB chunk would otherwise be copied several times on each side (into the
message, out of it, into the serialised buffer). The server writes a chunk
message as its small fields, serialised by protobuf, followed by the `data`
field written here (`frame_chunk`, or `chunk_frame` to write the data in place);
the client finds the `data` field's bytes in the received buffer and parses
only the rest with protobuf. Both are plain protobuf encoding: any protobuf
library reads and writes the same bytes.
"""

from __future__ import annotations

import ctypes

import numpy as np

from jaxattn.wire.codecs import WireError

# Field tags: (field_number << 3) | wire_type, wire type 2 = length-delimited.
HEADER_TAG = (1 << 3) | 2  # CaptureResponse.header
CHUNK_TAG = (2 << 3) | 2  # CaptureResponse.chunk
ITEMS_TAG = (3 << 3) | 2  # CaptureResponse.items (a coalesced message)
DATA_TAG = (12 << 3) | 2  # TensorChunk.data
DATA_FIELD = 12
PADDING_TAG = (13 << 3) | 2  # TensorChunk.padding
PADDING_FIELD = 13
# `chunk_frame` starts the data at a multiple of this in the message, so that a
# client can view the tensor's items in place (numpy wants them aligned to their
# size; the message's first byte is 16-aligned in a large CPython bytes object).
DATA_ALIGNMENT = 16


def varint(n: int) -> bytes:
    """The base-128 varint encoding of a non-negative integer."""
    if 0 <= n < 0x80:
        return _ONE_BYTE[n]  # tags and small lengths: most calls, framing each chunk
    if 0 < n < 0x200000:  # a piece's or a message's length: two or three bytes
        if n < 0x4000:
            return bytes((n & 0x7F | 0x80, n >> 7))
        return bytes((n & 0x7F | 0x80, (n >> 7) & 0x7F | 0x80, n >> 14))
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_ONE_BYTE = tuple(bytes((n,)) for n in range(0x80))


def varint_len(n: int) -> int:
    """How many bytes `varint(n)` writes (n >= 0)."""
    return 1 if n < 0x80 else (n.bit_length() + 6) // 7


def read_varint(buf, pos: int) -> tuple[int, int]:
    """(value, next position) of the varint at `pos`.

    Raises:
      WireError: truncated or longer than 10 bytes.
    """
    value = shift = 0
    for k in range(10):
        if pos + k >= len(buf):
            raise WireError("truncated varint")
        b = buf[pos + k]
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos + k + 1
        shift += 7
    raise WireError("varint longer than 10 bytes")


def length_delimited(tag: int, payload_len: int) -> bytes:
    """The tag and length prefix of a length-delimited field."""
    return bytes((tag,)) + varint(payload_len)


def frame_chunk(head: bytes, data) -> bytes:
    """A serialised CaptureResponse{chunk: <head fields> + data}, with one copy of `data`."""
    data_prefix = length_delimited(DATA_TAG, len(data))
    body = len(head) + len(data_prefix) + len(data)
    return b"".join((length_delimited(CHUNK_TAG, body), head, data_prefix, data))


# grpc-python sends only `bytes` (it copies them into its own buffer), and a
# bytes object is immutable once made: built from a buffer, the data would be
# copied twice (into the buffer, then into the bytes). CPython's own way to
# fill a new bytes object in place is PyBytes_FromStringAndSize(NULL, n), then
# writing its n bytes before anyone else sees it; `new_bytes` does that.
_from_size = ctypes.pythonapi.PyBytes_FromStringAndSize
_from_size.restype = ctypes.py_object
_from_size.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
_as_string = ctypes.pythonapi.PyBytes_AsString
_as_string.restype = ctypes.c_void_p
_as_string.argtypes = (ctypes.py_object,)
# Below this size a new bytes object may be one of CPython's shared singletons.
_MIN_NEW_BYTES = 2


def new_bytes(n: int) -> tuple[bytes, np.ndarray]:
    """A new `bytes` of `n` (>= 2) uninitialised bytes and a writable uint8 view of them.

    The caller writes every byte through the view before the bytes object is
    used (hashed, compared, sent): until then it is not a valid value.
    """
    if n < _MIN_NEW_BYTES:
        raise RuntimeError(f"new_bytes needs at least {_MIN_NEW_BYTES} bytes, got {n}")
    out = _from_size(None, n)
    return out, np.asarray(_Memory(out, n))


class _Memory:
    """The writable numpy view's base: points numpy at the bytes' data and keeps
    the bytes alive as long as any view of it lives."""

    def __init__(self, owner: bytes, n: int):
        self.owner = owner
        self.__array_interface__ = {
            "data": (_as_string(owner), False),
            "shape": (n,),
            "typestr": "|u1",
            "version": 3,
        }


def _chunk_lead(head_len: int, data_len: int, at: int, wrap: bool) -> tuple[bytes, bytes, bytes]:
    """(lead, pad, data prefix) of a chunk item written at byte `at` of its message:
    `lead` comes before the chunk's head fields (its CaptureResponse.chunk prefix,
    after a CaptureResponse.items prefix where `wrap`), then the head, `pad` (a
    `padding` field, or nothing), the data's prefix and the data, which starts at
    a multiple of DATA_ALIGNMENT in the message.

    Sizes only are worked out (`varint_len`; a `padding` field's bytes follow from its
    length alone) and the bytes made once: this runs for every chunk sent.
    """
    data_prefix = length_delimited(DATA_TAG, data_len)
    fixed = head_len + len(data_prefix) + data_len  # the chunk's body but the padding
    # Where the data starts with a padding of `pad` bytes (its lead's length: a prefix of
    # the chunk's body, and of the items field that holds it where `wrap`).
    before = at + head_len + len(data_prefix)

    def data_start(pad: int) -> int:
        lead = 1 + varint_len(fixed + pad)
        if wrap:
            lead += 1 + varint_len(lead + fixed + pad)
        return before + lead + pad

    pad = 0
    for _ in range(2):  # the padding may grow a prefix by a byte: then once more
        start = data_start(pad)
        if start % DATA_ALIGNMENT == 0:
            break
        pad = -(start - pad) % DATA_ALIGNMENT
        pad += DATA_ALIGNMENT if pad < 2 else 0  # a field takes 2 bytes at least
    else:
        # A length at a varint boundary (2^14, 2^21, ...) can flip back and forth with
        # the padding: try every padding size; the lead is always computed for the pad
        # it goes with, so the message is valid even unaligned (the client then copies).
        pad = next(
            (
                n
                for n in (0, *range(2, 2 + 2 * DATA_ALIGNMENT))
                if data_start(n) % DATA_ALIGNMENT == 0
            ),
            pad,
        )
    lead = length_delimited(CHUNK_TAG, fixed + pad)
    if wrap:
        lead = length_delimited(ITEMS_TAG, len(lead) + fixed + pad) + lead
    return lead, padding(pad) if pad else b"", data_prefix


def chunk_frame(head: bytes, data_len: int) -> tuple[bytes, np.ndarray, np.ndarray]:
    """A serialised CaptureResponse{chunk: <head fields> + data} with the data not yet written.

    Returns (message, head region, data region): the regions are writable
    uint8 views of the message. The caller fills the data region (one copy of
    the data, wherever it comes from) and may rewrite the head region with a
    head of the same length (a checksum computed over the data in place),
    before the message is used. A `padding` field between the head and the data
    starts the data at a multiple of DATA_ALIGNMENT in the message.
    """
    lead, pad, data_prefix = _chunk_lead(len(head), data_len, 0, wrap=False)
    start = len(lead)
    data_start = start + len(head) + len(pad) + len(data_prefix)
    message, view = new_bytes(data_start + data_len)
    view[:data_start] = np.frombuffer(lead + head + pad + data_prefix, np.uint8)
    return message, view[start : start + len(head)], view[data_start:]


def frame_items(items: list[tuple[bytes, int | None]]) -> tuple[bytes, list]:
    """A serialised coalesced CaptureResponse{items: [...]} with the chunks' data not yet written.

    `items` are (header bytes, None) for an ExampleHeader and (chunk head fields,
    data length) for a TensorChunk. Returns (message, regions): per item None
    for a header, or (head region, data region) for a chunk: writable uint8
    views of the message, as `chunk_frame`'s, but the head region also spans the
    chunk's padding, so that `rewrite_head` may write a shorter head there. Each
    chunk's data starts at a multiple of DATA_ALIGNMENT in the whole message.
    """
    framed, spans, at = [], [], 0  # each item's bytes before its data; where it goes
    for head, data_len in items:
        if data_len is None:
            header = frame_header(head)
            framed.append((at, length_delimited(ITEMS_TAG, len(header)) + header))
            spans.append(None)
            at += len(framed[-1][1])
            continue
        lead, pad, data_prefix = _chunk_lead(len(head), data_len, at, wrap=True)
        piece = b"".join((lead, head, pad, data_prefix))
        framed.append((at, piece))
        head_start = at + len(lead)
        at += len(piece)
        spans.append((head_start, head_start + len(head) + len(pad), at, data_len))
        at += data_len
    message, view = new_bytes(at)
    writable = memoryview(view)  # small writes: a memoryview's, not numpy's, per item
    for pos, piece in framed:
        writable[pos : pos + len(piece)] = piece
    regions = [
        None if span is None else (view[span[0] : span[1]], view[span[2] : span[2] + span[3]])
        for span in spans
    ]
    return message, regions


def rewrite_head(region: np.ndarray, head: bytes) -> None:
    """Write a chunk's head fields over `region` (its old head and padding, from
    `frame_items`): the rest of the region becomes a `padding` field. A head is as
    long as the old one, or 5 bytes shorter (a zero crc32 is left out)."""
    rest = len(region) - len(head)
    if rest < 0 or rest == 1:
        raise RuntimeError(f"a head of {len(head)} bytes does not fit {len(region)} bytes")
    region[: len(head)] = np.frombuffer(head, np.uint8)
    if rest:
        region[len(head) :] = np.frombuffer(padding(rest), np.uint8)


def padding(size: int) -> bytes:
    """A `padding` field of `size` bytes in all, or of DATA_ALIGNMENT more where `size`
    is below the 2 bytes of its tag and length (size mod DATA_ALIGNMENT is kept)."""
    if size < 2:
        size += DATA_ALIGNMENT
    return length_delimited(PADDING_TAG, size - 2) + bytes(size - 2)


def frame_header(header: bytes) -> bytes:
    """A serialised CaptureResponse{header: header}."""
    return length_delimited(HEADER_TAG, len(header)) + header


def split_items(buf) -> list[tuple[str, memoryview, memoryview | None]] | None:
    """Split a serialised CaptureResponse, of one item or a coalesced one (`items`),
    into its items without copying the data: ("header", header bytes, None), or
    ("chunk", the chunk's other fields, its data); None when the buffer is anything
    else (the caller then parses it with protobuf)."""
    view = memoryview(buf)
    try:
        if not view or view[0] != ITEMS_TAG:
            one = _split_one(view)
            return None if one is None else [one]
        out, pos = [], 0
        while pos < len(view):
            if view[pos] != ITEMS_TAG:
                return None  # another field beside the items: let protobuf say what it is
            size, start = read_varint(view, pos + 1)
            end = start + size
            if end > len(view):
                return None
            one = _split_one(view[start:end])
            if one is None:
                return None
            out.append(one)
            pos = end
        return out
    except ValueError:
        return None


def _split_one(view: memoryview) -> tuple[str, memoryview, memoryview | None] | None:
    """One item (a CaptureResponse of a header or a chunk) as `split_items` gives each;
    None where it is not the common shape, WireError where a varint is broken."""
    if not view or view[0] not in (HEADER_TAG, CHUNK_TAG):
        return None
    size, start = read_varint(view, 1)
    if start + size != len(view):
        return None  # more than one field: let protobuf merge them
    body = view[start:]
    if view[0] == HEADER_TAG:
        return "header", body, None
    # The walk below is the receiving thread's per-chunk work (with the GIL held): a
    # field's key and a length are mostly one byte, read inline (`read_varint` for
    # longer ones), and a varint field is only stepped over (protobuf reads it). The
    # fields other than `data` and `padding` are kept as byte ranges of the body: one
    # slice, no copy, where they are contiguous (the server's order).
    rest: list[tuple[int, int]] = []
    data, pos, n = None, 0, len(body)
    while pos < n:
        key = body[pos]
        if key < 0x80:
            after = pos + 1
        else:
            key, after = read_varint(body, pos)
        field, wire_type = key >> 3, key & 7
        if wire_type == 0:  # its value is protobuf's to read: only where it ends
            end = after
            while end < n and body[end] >= 0x80:
                end += 1
            end += 1
            if end - after > 10:
                return None  # longer than a varint can be: let protobuf say so
        elif wire_type == 1:
            end = after + 8
        elif wire_type == 5:
            end = after + 4
        elif wire_type == 2:
            if after < n and body[after] < 0x80:
                size, value_start = body[after], after + 1
            else:
                size, value_start = read_varint(body, after)
            end = value_start + size
            if field == DATA_FIELD:
                if data is not None:
                    return None  # repeated data field: protobuf's last-wins
                data = body[value_start:end]
                pos = end
                continue
            if field == PADDING_FIELD and end <= n:
                pos = end  # nothing to parse
                continue
        else:
            return None
        if end > n:
            return None
        if rest and rest[-1][1] == pos:
            rest[-1] = (rest[-1][0], end)
        else:
            rest.append((pos, end))
        pos = end
    if len(rest) == 1:
        fields = body[rest[0][0] : rest[0][1]]
    else:
        fields = memoryview(b"".join(body[a:b] for a, b in rest))
    return "chunk", fields, data if data is not None else memoryview(b"")


def first_item(buf) -> tuple[str, memoryview, memoryview | None] | None:
    """The first item of a serialised CaptureResponse (its own, or its `items`' first),
    as `split_items` gives each, without reading the others; None where the framing is
    not the common shape (the caller then parses it with protobuf)."""
    view = memoryview(buf)
    try:
        if view and view[0] == ITEMS_TAG:
            size, start = read_varint(view, 1)
            if start + size > len(view):
                return None
            view = view[start : start + size]
        return _split_one(view)
    except ValueError:
        return None


def headers_in(buf) -> int:
    """How many ExampleHeaders a serialised CaptureResponse carries (its own, or its
    items'), read from the framing alone (0 where the framing is not the server's)."""
    view = memoryview(buf)
    if not view:
        return 0
    if view[0] != ITEMS_TAG:
        return int(view[0] == HEADER_TAG)
    count, pos = 0, 0
    try:
        while pos < len(view) and view[pos] == ITEMS_TAG:
            size, start = read_varint(view, pos + 1)
            count += start < len(view) and view[start] == HEADER_TAG
            pos = start + size
    except ValueError:
        pass
    return count
