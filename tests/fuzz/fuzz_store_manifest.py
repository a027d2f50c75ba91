"""A store's metadata and manifest parts as `open_store` reads them, and the reads they
drive: the root zarr.json (`jaxattn.store.metadata.read`, `model_info`, the kv_heads
check) and the manifest part of shard 0 (`ShardPart.from_json`) of a real store (two
shards of float32 captures written by `tests/store/store_helpers.py`), each example
then read through TensorStore at the offsets and shapes the manifest gives.

An input is the root document, a line ``--manifest--``, then the manifest part. An
opened store's entries must be usable (tokens strings, offsets and shapes whole
numbers), and each example reads as a Capture or a CaptureFileError.
"""

from __future__ import annotations

from harness import workdir

from jaxattn.continuations import STOPS
from jaxattn.errors import CaptureFileError
from jaxattn.store import layout, open_store

DESIGNED = (CaptureFileError,)
SEPARATOR = b"\n--manifest--\n"
TOKENS = (b'"attributes"', b'"jaxattn"', b'"format_version"', b'"spec"', b'"examples"', b"[[[")
TOKENS += (b'"data"', b'"offset"', b'"shape"', b'"kv_heads"', b"null", b"-1", b"{}", b"[]")
TOKENS += (b'"generated_start"', b'"stop"', b'"eos"', SEPARATOR)
_MANIFEST = layout.manifest_key(0)


def _folder():
    return workdir() / "store"


def prepare() -> None:
    """Write the real store once."""
    if (_folder() / "zarr.json").is_file():
        return
    from store_helpers import captures, write_store

    write_store(_folder(), captures(4), shard_size=2)


_SEED: list[bytes] = []  # the store's documents as written, before any input replaced them


def seeds() -> list[bytes]:
    prepare()
    if not _SEED:  # read once: `one_input` overwrites the files (a later reader, such as
        # tests/fuzz/test_fuzz_found.py after the replay, still gets the real store's)
        root, part = (_folder() / "zarr.json").read_bytes(), (_folder() / _MANIFEST).read_bytes()
        _SEED.append(root + SEPARATOR + part)
    return list(_SEED)


def one_input(data: bytes) -> None:
    root, _, manifest = data.partition(SEPARATOR)
    (_folder() / "zarr.json").write_bytes(root)
    (_folder() / _MANIFEST).write_bytes(manifest)
    store = open_store(_folder(), partial=True)
    assert all(isinstance(q, str) for q in store.what) and isinstance(store.dtype, str)
    for entry in store.entries:
        assert all(isinstance(t, str) for t in entry.tokens), entry
        for offset, shape in entry.data.values():
            assert all(type(n) is int and n >= 0 for n in (offset, *shape)), entry
    for cap, entry in zip(store, store.entries, strict=True):
        assert cap.tokens == entry.tokens and set(cap.tensors) <= set(store.what), cap
        g = cap.generated_start  # a decoder's continuation: within its tokens, or None
        assert g is None or (type(g) is int and 0 <= g <= len(cap.tokens)), cap
        assert cap.stop is None or cap.stop in STOPS, cap  # why it ended, or None
