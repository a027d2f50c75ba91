"""The Capture wire format: tensors <-> self-describing, independently decodable chunks.

    from jaxattn.wire import chunk_example, StreamDecoder
    messages = list(chunk_example(0, cap, codec="zstd", max_chunk_bytes=1 << 20))
    decoder = StreamDecoder()
    caps = [c for m in messages if (c := decoder.feed(m)) is not None]

The server sends `serialize_example`'s bytes (the same messages, serialised
with one copy of each chunk's data), or `serialize_coalesced`'s (the same items
packed several to a message, where the request asks: `coalesce`), and the
client decodes received bytes with `StreamDecoder.feed_all`, which reads each
chunk's data in place.

Numpy and protobuf only (no jax): the server sends with it (`send`), the client
receives with it (`receive`); `codecs` holds the per-chunk byte codecs (CODECS),
datatype names and checksum, `codec_pool` the threads that compress a stream's
chunks in order (the server) and decode them (the client), `coalesce` several
items to a message, `protowire` the hand-framed messages.
The format is specified in protos/jaxattn/v1/attention.proto.
"""

from jaxattn.wire.coalesce import serialize_coalesced
from jaxattn.wire.codecs import (
    CODECS,
    DEFAULT_MAX_CHUNK_BYTES,
    MAX_MAX_CHUNK_BYTES,
    MIN_MAX_CHUNK_BYTES,
    ChecksumError,
    WireError,
)
from jaxattn.wire.receive import StreamDecoder
from jaxattn.wire.send import Compressor, chunk_example, serialize_example

__all__ = [
    "CODECS",
    "DEFAULT_MAX_CHUNK_BYTES",
    "MAX_MAX_CHUNK_BYTES",
    "MIN_MAX_CHUNK_BYTES",
    "ChecksumError",
    "Compressor",
    "StreamDecoder",
    "WireError",
    "chunk_example",
    "serialize_coalesced",
    "serialize_example",
]
