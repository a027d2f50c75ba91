"""Where things live in a jaxattn store, and the zarr v3 metadata of its arrays.

A store is a zarr v3 hierarchy (see STORE.md at the repository root)::

    STORE/zarr.json                        root group; attributes["jaxattn"] = store metadata
    STORE/<quantity>/zarr.json             one group per captured quantity
    STORE/<quantity>/s000012/zarr.json     1-D array: shard 12's examples, flattened, concatenated
    STORE/<quantity>/s000012/c/0 ...       its chunks (blosc-lz4 or zstd, see COMPRESSORS)
    STORE/manifest/zarr.json               a group holding the manifest parts
    STORE/manifest/s000012/zarr.json       group; attributes["jaxattn_manifest"] = shard 12's
                                           manifest part; its presence = shard 12 is done

Pure Python and numpy: the reader and the writer share it; no tensorstore, no jax.
"""

from __future__ import annotations

import numpy as np

from jaxattn import quantities
from jaxattn.dtypes import DTYPES, from_bits, to_bits

# Bumped when the layout changes incompatibly; readers refuse other formats.
FORMAT = "jaxattn-store"
FORMAT_VERSION = 1
# A store whose maps hold selected query rows or key positions (spec.query_positions,
# spec.key_positions): a reader of version 1 would take them for whole [T, S] maps,
# so such a store is of a version it refuses. Stores without a selection stay 1.
SELECTED_FORMAT_VERSION = 2
READABLE_VERSIONS = (FORMAT_VERSION, SELECTED_FORMAT_VERSION)

MANIFEST_DIR = "manifest"
MANIFEST_ATTRIBUTE = "jaxattn_manifest"
DEFAULT_CHUNK_BYTES = 1 << 20  # 1 MiB of uncompressed data per chunk
# Smaller chunks would be one file per few elements (a million files for a small corpus).
MIN_CHUNK_BYTES = 1 << 12

# Compression per output dtype (benchmarks/dump_bench.py, EWT sentences, MiniLM
# attention): float32 mantissas are near-random, and blosc's lz4 over
# byte-shuffled data keeps 0.90 of the bytes at half the CPU of zstd level 1
# (0.92); float16/bfloat16 and uint8 compress better with zstd level 1 (0.90
# and 0.47) than with blosc-lz4 (0.99 and 0.82).
_BLOSC_LZ4_SHUFFLE = {
    "name": "blosc",
    "configuration": {
        "cname": "lz4",
        "clevel": 5,
        "shuffle": "shuffle",
        "typesize": 4,
        "blocksize": 0,
    },
}
_ZSTD_1 = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}
COMPRESSORS = {
    "float32": _BLOSC_LZ4_SHUFFLE,
    "float16": _ZSTD_1,
    "bfloat16": _ZSTD_1,
    "uint8": _ZSTD_1,
}


def shard_name(shard: int) -> str:
    """The array name of a shard inside a quantity group (``s000012``)."""
    return f"s{shard:06d}"


def array_path(quantity: str, shard: int) -> str:
    """Key prefix of one shard's array of `quantity`, relative to the store root."""
    return f"{quantity}/{shard_name(shard)}/"


def manifest_key(shard: int) -> str:
    """Key of one shard's manifest part (a group's zarr.json), relative to the store root."""
    return f"{MANIFEST_DIR}/{shard_name(shard)}/zarr.json"


def shard_of_manifest_key(key: str) -> int | None:
    """Inverse of `manifest_key` (None for any other key)."""
    prefix, suffix = f"{MANIFEST_DIR}/s", "/zarr.json"
    if (
        key.startswith(prefix)
        and key.endswith(suffix)
        and key[len(prefix) : -len(suffix)].isdigit()
    ):
        return int(key[len(prefix) : -len(suffix)])
    return None


def storage_dtype(dtype: str) -> np.dtype:
    """The zarr data type an output dtype is stored as: zarr-python has no bfloat16, so
    its raw bits (uint16, `jaxattn.dtypes.DTYPES`), named in the array's attributes."""
    d = DTYPES[dtype]
    return d.dtype if d.bits is None else d.bits


def to_storage(array: np.ndarray, dtype: str) -> np.ndarray:
    """A capture array as stored: flattened, bfloat16 as its raw bits (`to_bits`)."""
    return to_bits(np.ascontiguousarray(array).reshape(-1), dtype)


def from_storage(flat: np.ndarray, dtype: str, shape) -> np.ndarray:
    """Inverse of `to_storage`: the array of one example in its output dtype."""
    return from_bits(flat, dtype).reshape(shape)


def axis_sizes(
    *,
    layers: int,
    heads: int,
    head_dim: int,
    hidden: int,
    kv_heads: int = 0,
    rows: int | None = None,
    keys: int | None = None,
) -> dict[str, int]:
    """Sizes of the fixed axes of the legend (L, H, G, K, D); T and S are per example.
    kv_heads: G, the key/value heads of a grouped-query model (0: G = H). rows, keys:
    the maps' selected query rows and key positions (their T and S: "rows", "keys"),
    None where every position is kept."""
    out = {"L": layers, "H": heads, "G": kv_heads or heads, "K": head_dim, "D": hidden}
    return out | {k: v for k, v in (("rows", rows), ("keys", keys)) if v is not None}


def _sizes(quantity: str, sizes: dict[str, int], length: int) -> dict[str, int]:
    tokens = quantities.token_sizes(quantity, length, sizes.get("rows"), sizes.get("keys"))
    return {**sizes, **tokens}


def example_shape(quantity: str, sizes: dict[str, int], length: int) -> tuple[int, ...]:
    """Shape of one example's `quantity` of `length` tokens (`jaxattn.quantities.shape`;
    a map's T and S are the selected rows and keys where `sizes` has them)."""
    return quantities.shape(quantity, _sizes(quantity, sizes, length))


def example_size(quantity: str, sizes: dict[str, int], length: int) -> int:
    """Elements of one example's `quantity`."""
    return quantities.size(quantity, _sizes(quantity, sizes, length))


def group_metadata(attributes: dict | None = None) -> dict:
    """A zarr v3 group node's zarr.json."""
    return {"zarr_format": 3, "node_type": "group", "attributes": attributes or {}}


def array_metadata(*, length: int, dtype: str, chunk_bytes: int, quantity: str) -> dict:
    """The zarr v3 metadata of one shard array (the tensorstore ``metadata`` member).

    Args:
      length: elements in the array (the shard's examples, concatenated).
      dtype: the output dtype (float32, float16, bfloat16, uint8).
      chunk_bytes: uncompressed bytes per chunk.
      quantity: the quantity name (recorded in the attributes).
    """
    stored = storage_dtype(dtype)
    chunk = max(1, min(chunk_bytes // stored.itemsize, length))
    codecs = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if stored.itemsize == 1:
        codecs = [{"name": "bytes"}]  # endianness is meaningless for one-byte types
    codecs.append(COMPRESSORS[dtype])
    return {
        "shape": [length],
        "data_type": stored.name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [chunk]}},
        "chunk_key_encoding": {"name": "default"},
        "fill_value": 0,
        "codecs": codecs,
        # every_chunk: the writer stores every chunk, zeros too (a missing one is damage,
        # not a chunk of fill values: `missing_chunks`).
        "attributes": {"jaxattn": {"quantity": quantity, "dtype": dtype, "every_chunk": True}},
    }


def missing_chunks(array_meta: dict, chunk_keys: int) -> int:
    """How many of an array's chunk files are missing, given `chunk_keys` found under its
    ``c/`` prefix (0 for arrays of writers that skipped all-zero chunks: unknowable)."""
    if not array_meta.get("attributes", {}).get("jaxattn", {}).get("every_chunk"):
        return 0
    length = array_meta["shape"][0]
    chunk = array_meta["chunk_grid"]["configuration"]["chunk_shape"][0]
    return max(0, -(-length // chunk) - chunk_keys)
