"""The Capture wire format: tensors <-> self-describing, independently decodable chunks.

    from jaxattn.wire import encode_example, StreamDecoder
    messages = list(encode_example(0, cap, codec="zstd", max_chunk_bytes=1 << 20))
    decoder = StreamDecoder()
    caps = [c for m in messages if (c := decoder.feed(m)) is not None]

Numpy and protobuf only (no jax): the server encodes with it, the client
decodes with it. The format is specified in protos/jaxattn/v1/attention.proto.
"""

from jaxattn.wire.chunks import StreamDecoder, encode_example
from jaxattn.wire.codecs import (
    CODECS,
    DEFAULT_MAX_CHUNK_BYTES,
    MAX_MAX_CHUNK_BYTES,
    MIN_MAX_CHUNK_BYTES,
    ChecksumError,
    WireError,
)

__all__ = [
    "CODECS",
    "DEFAULT_MAX_CHUNK_BYTES",
    "MAX_MAX_CHUNK_BYTES",
    "MIN_MAX_CHUNK_BYTES",
    "ChecksumError",
    "StreamDecoder",
    "WireError",
    "encode_example",
]
