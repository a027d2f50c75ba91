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


def precision_name(value: int) -> str:
    """An ExampleHeader's precision as a Capture names it: its name; "highest" where it
    is unspecified (a server of jaxattn 0.1 sends none: it computed at "highest"); one
    newer than this jaxattn by its number, "unknown (N)" (`precision_value` reverses it)."""
    return PB_TO_PRECISION.get(value, f"unknown ({value})") or "highest"


def precision_value(name: str) -> int:
    """The wire Precision of a Capture's `precision`, `precision_name`'s inverse: a
    resumed stream asks for the one its first examples came at, a precision newer
    than this jaxattn by its number."""
    if name in PRECISION_TO_PB:
        return PRECISION_TO_PB[name]
    return int(name.removeprefix("unknown (").removesuffix(")"))


# KServe v2 / Triton datatype strings, as carried by TensorChunk.datatype.
DATATYPES = {"float32": "FP32", "float16": "FP16", "bfloat16": "BF16", "uint8": "UINT8"}
DATATYPE_TO_DTYPE = {v: k for k, v in DATATYPES.items()}

# Default chunk payload bound: the whole message stays under gRPC's 4 MiB default.
DEFAULT_MAX_CHUNK_BYTES = (4 << 20) - (16 << 10)
MIN_MAX_CHUNK_BYTES = 1 << 10
MAX_MAX_CHUNK_BYTES = 64 << 20

# The most a uint32 field of the .proto carries (CaptureRequest.generate, ModelInfo's limits).
MAX_UINT32 = (1 << 32) - 1
MAX_UINT64 = (1 << 64) - 1
MAX_INT32 = (1 << 31) - 1  # gRPC's int channel options (message sizes)

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


def big_endian(dtype: np.dtype) -> bool:
    """Whether the dtype's items are big-endian (`little_endian` copies them)."""
    return dtype.byteorder == ">" or (dtype.byteorder == "=" and sys.byteorder == "big")


def little_endian(array: np.ndarray) -> np.ndarray:
    """The array with little-endian items (a byte-swapped copy only where they are not)."""
    if big_endian(array.dtype):
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
    raise RuntimeError(f"unknown codec {codec!r}: valid codecs are {', '.join(CODECS)}")


def decompress(data: bytes, codec: str, length: int):
    """Decompress one chunk into a new buffer of `length` bytes (bytes-like; `data`
    itself for codec none).

    Raises:
      WireError: a corrupt frame, or one that does not decode to exactly `length`
        bytes (never more are made, whatever the frame announces).
    """
    if codec == "zstd":
        out = np.empty(length, np.uint8)
        _zstd_into(data, out)
        return out
    try:
        if codec == "none":
            out = data
        elif codec == "lz4":
            import lz4.frame

            frame = lz4.frame.LZ4FrameDecompressor()
            out = frame.decompress(data, max_length=length)
            # Where max_length stopped a longer frame, or bytes follow it: refused (a
            # client before this took the first `length` bytes).
            if len(out) == length and not frame.eof:
                raise WireError(f"a lz4 chunk decoded to more than {length} bytes")
            if len(out) == length and frame.unused_data:
                raise WireError(f"a lz4 chunk with {len(frame.unused_data)} bytes after its frame")
        else:
            raise WireError(f"unknown codec {codec!r}")
    except WireError:
        raise
    except Exception as e:  # RuntimeError from lz4: corrupt input
        raise WireError(f"cannot decode a {codec} chunk: {e}") from e
    if len(out) != length:
        raise WireError(f"a {codec} chunk decoded to {len(out)} bytes, expected {length}")
    return out


def decompress_into(data: bytes, codec: str, out) -> None:
    """Decompress one chunk into `out`, a writable buffer of the bytes it must decode
    to (a slice of the tensor's): zstd straight into it, lz4 through `decompress`
    and a copy.

    Raises:
      WireError: as `decompress`.
    """
    if codec == "zstd":
        _zstd_into(data, out)
    else:
        memoryview(out)[:] = decompress(data, codec, len(out))


def _zstd_into(data: bytes, out) -> None:
    """One zstd frame decoded into `out`, never past it; a WireError where it is corrupt
    or does not make exactly len(out) bytes (`_zstd_error`)."""
    import zstandard

    length = len(out)
    try:
        # -1: the frame does not say. The decoder takes an input that stops inside the
        # frame for its end: the frame's own size says whether it is all there.
        if zstandard.frame_content_size(data) in (-1, length) and _frame_size(data) == len(data):
            with _zstd()[1].stream_reader(data, read_across_frames=False) as reader:
                got = 0
                while got < length and (n := reader.readinto(out[got:])):
                    got += n
                if got == length and not reader.read(1):  # b"": the frame ends there
                    return
    except Exception:  # noqa: BLE001 - zstd.ZstdError: corrupt input, said below
        pass
    raise _zstd_error(data, length)


def _frame_size(data) -> int:
    """The bytes of the zstd frame `data` starts with, from its header, its blocks'
    headers and its checksum flag (RFC 8878, 3.1.1); WireError where it does not
    end inside `data`, zstd.ZstdError where it does not start as a frame."""
    import zstandard

    view = memoryview(data)
    pos = zstandard.frame_header_size(view)  # the magic number and the frame header
    while True:
        if pos + 3 > len(view):
            raise WireError("the frame ends inside a block header")
        block = int.from_bytes(view[pos : pos + 3], "little")
        kind, size = (block >> 1) & 3, block >> 3  # raw, RLE (one byte), compressed, -
        if kind == 3:
            raise WireError("a reserved block type")
        pos += 3 + (1 if kind == 1 else size)
        if block & 1:  # the last block
            return pos + (4 if view[4] & 0x04 else 0)  # Content_Checksum_flag


def _zstd_error(data: bytes, length: int) -> WireError:
    """What is wrong with a zstd chunk that did not decode into its `length` bytes: the
    error the one-shot decoder gives (what the client said before it decoded into the
    tensor), without ever making more than `length` bytes of it."""
    import zstandard

    try:
        announced = zstandard.frame_content_size(data)
    except Exception:  # noqa: BLE001 - not a frame: the decoder below says so
        announced = -1
    if announced > length:
        return WireError(f"a zstd chunk decoded to {announced} bytes, expected {length}")
    try:  # a decoder of its own: what it says of a corrupt frame depends on no history
        made = len(zstandard.ZstdDecompressor().decompress(data, max_output_size=length))
    except Exception as e:  # zstd.ZstdError
        return WireError(f"cannot decode a zstd chunk: {e}")
    if made != length:
        return WireError(f"a zstd chunk decoded to {made} bytes, expected {length}")
    return WireError(f"a zstd chunk decoded to more than {length} bytes (data after its frame)")
