"""Per-chunk byte codecs, datatype names and the chunk checksum (numpy-only).

Everything here is specified in protos/jaxattn/v1/attention.proto; this module
is its Python implementation, shared by the server (encode) and the client
(decode). No jax: the client imports it.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
from zlib_ng import zlib_ng

from jaxattn.dtypes import OUTPUT_DTYPES
from jaxattn.errors import JaxattnError
from jaxattn.v1 import attention_pb2 as pb

CODECS = ("none", "zstd", "lz4")

# A Capture call's initial metadata: the answering model's weights fingerprint.
WEIGHTS_METADATA = "jaxattn-weights"

CODEC_TO_PB = {"none": pb.CODEC_NONE, "zstd": pb.CODEC_ZSTD, "lz4": pb.CODEC_LZ4}
PB_TO_CODEC = {v: k for k, v in CODEC_TO_PB.items()} | {pb.CODEC_UNSPECIFIED: "none"}

DTYPE_TO_PB = {
    "float32": pb.DTYPE_FLOAT32,
    "float16": pb.DTYPE_FLOAT16,
    "bfloat16": pb.DTYPE_BFLOAT16,
    "uint8": pb.DTYPE_UINT8,
}
PB_TO_DTYPE = {v: k for k, v in DTYPE_TO_PB.items()} | {pb.DTYPE_UNSPECIFIED: "float32"}

PRECISION_TO_PB = {
    "highest": pb.PRECISION_HIGHEST,
    "tf32": pb.PRECISION_TF32,
    "bf16": pb.PRECISION_BF16,
}
# PRECISION_UNSPECIFIED means "the server's default": it maps to None, not to a name.
PB_TO_PRECISION = {v: k for k, v in PRECISION_TO_PB.items()} | {pb.PRECISION_UNSPECIFIED: None}

# KServe v2 / Triton datatype strings, as carried by TensorChunk.datatype.
DATATYPES = {"float32": "FP32", "float16": "FP16", "bfloat16": "BF16", "uint8": "UINT8"}
DATATYPE_TO_DTYPE = {v: k for k, v in DATATYPES.items()}

# Default chunk payload bound: the whole message stays under gRPC's 4 MiB default.
DEFAULT_MAX_CHUNK_BYTES = (4 << 20) - (16 << 10)
MIN_MAX_CHUNK_BYTES = 1 << 10
MAX_MAX_CHUNK_BYTES = 64 << 20

# zstd level 1: at capture sizes the wire, not the ratio, is what we pay for;
# level 3 (zstd's default) is ~2x slower for a few percent.
ZSTD_LEVEL = 1


class WireError(JaxattnError, ValueError):
    """A response stream that breaks the protocol (bad chunk, missing data)."""


class ChecksumError(WireError):
    """A chunk whose decoded bytes do not match its CRC-32."""


def checksum(data) -> int:
    """CRC-32 (IEEE, zlib's) of a bytes-like object, as an unsigned 32-bit int.

    zlib-ng's implementation: the same CRC as `zlib.crc32`, folded with the CPU's
    carry-less multiply (~20 GB/s on the 2-core test machine against zlib's ~4 GB/s;
    it was the largest item of the service's send and receive profiles).
    """
    return zlib_ng.crc32(data) & 0xFFFFFFFF


def wire_dtype(dtype: str) -> np.dtype:
    """The little-endian numpy dtype of an output dtype name."""
    return OUTPUT_DTYPES[dtype].newbyteorder("<")


def little_endian(array: np.ndarray) -> np.ndarray:
    """The array with little-endian items (a byte-swapped copy only where they are not)."""
    if array.dtype.byteorder == ">" or (array.dtype.byteorder == "=" and sys.byteorder == "big"):
        return array.byteswap().view(array.dtype.newbyteorder("<"))
    return array


def le_bytes(array: np.ndarray) -> memoryview:
    """The array's raw bytes, little-endian, C order, as a flat byte view."""
    array = little_endian(np.ascontiguousarray(array))
    return memoryview(array.reshape(-1).view(np.uint8))


# Compressor objects are not thread-safe; the server encodes in many threads.
_local = threading.local()


def _zstd():
    import zstandard

    if not hasattr(_local, "zc"):
        _local.zc = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True)
        _local.zd = zstandard.ZstdDecompressor()
    return _local.zc, _local.zd


def compress(data, codec: str) -> bytes:
    """Compress one chunk's bytes into one self-contained frame."""
    if codec == "none":
        return bytes(data)
    if codec == "zstd":
        return _zstd()[0].compress(data)
    if codec == "lz4":
        import lz4.frame

        return lz4.frame.compress(data, store_size=True)
    raise ValueError(f"unknown codec {codec!r}: valid codecs are {', '.join(CODECS)}")


def decompress(data: bytes, codec: str, length: int) -> bytes:
    """Decompress one chunk, producing at most `length` bytes.

    Raises:
      WireError: a corrupt frame, or one that does not decode to `length` bytes.
    """
    try:
        if codec == "none":
            out = data
        elif codec == "zstd":
            out = _zstd()[1].decompress(data, max_output_size=length)
        elif codec == "lz4":
            import lz4.frame

            out = lz4.frame.LZ4FrameDecompressor().decompress(data, max_length=length)
        else:
            raise WireError(f"unknown codec {codec!r}")
    except WireError:
        raise
    except Exception as e:  # zstd.ZstdError, RuntimeError from lz4: corrupt input
        raise WireError(f"cannot decode a {codec} chunk: {e}") from e
    if len(out) != length:
        raise WireError(f"a {codec} chunk decoded to {len(out)} bytes, expected {length}")
    return out
