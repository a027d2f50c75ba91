"""`open_store`: random access to a finished store, one `Capture` per example.

Needs tensorstore and numpy, not jax: stores are read where the client runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from jaxattn.capture import Capture
from jaxattn.store import layout
from jaxattn.store import metadata as store_metadata
from jaxattn.store.kvstore import KeyValue, child_spec, root_spec
from jaxattn.store.manifest import Entry, ShardPart

# Decoded chunks kept for reuse: iterating reads neighbouring examples from the same chunks.
_CACHE_BYTES = 64 << 20


def read_parts(kv: KeyValue, num_shards: int) -> dict[int, ShardPart]:
    """The committed manifest parts of a store, by shard."""
    parts = {}
    for key in kv.list(layout.MANIFEST_DIR + "/"):
        shard = layout.shard_of_manifest_key(key)
        if shard is not None and shard < num_shards:
            doc = kv.read_json(key)["attributes"][layout.MANIFEST_ATTRIBUTE]
            parts[shard] = ShardPart.from_json(doc)
    return parts


class Store:
    """A jaxattn store opened for reading (build it with `open_store`).

    ``store[i]`` is the i-th stored example in input order, as the `Capture`
    the engine returned for it (uint8 tensors with their quantisation);
    ``len(store)`` and iteration work as for a list.

    Attributes:
      metadata: the store metadata (model, spec, input, shards; see STORE.md).
      entries: the manifest entry of every stored example, in input order.
      parts: the committed manifest parts, by shard.
      complete: every shard of the input is committed.
    """

    def __init__(self, location: str | os.PathLike, *, partial: bool = False):
        import tensorstore as ts

        self.location = os.fspath(location)
        self._root = root_spec(location)
        kv = KeyValue(self._root)
        meta = store_metadata.read(kv)
        if meta is None:
            raise FileNotFoundError(f"no jaxattn store at {self.location}")
        if meta.get("format_version") != layout.FORMAT_VERSION:
            raise ValueError(
                f"{self.location}: store format version {meta.get('format_version')}"
                f" is not {layout.FORMAT_VERSION}; use the jaxattn that wrote it"
            )
        self.metadata = meta
        num_shards = meta["shards"]["count"]
        self.parts = read_parts(kv, num_shards)
        self.complete = len(self.parts) == num_shards
        if not self.complete and not partial:
            raise ValueError(
                f"the store at {self.location} is incomplete: {len(self.parts)} of {num_shards} "
                "shards are done; rerun the dump command to finish it (or open it with "
                "partial=True)"
            )
        self.entries: list[Entry] = []
        self._shard_of: list[int] = []
        for shard in sorted(self.parts):
            self.entries.extend(self.parts[shard].examples)
            self._shard_of.extend([shard] * len(self.parts[shard].examples))
        self._context = ts.Context({"cache_pool": {"total_bytes_limit": _CACHE_BYTES}})
        self._arrays: dict[tuple[str, int], object] = {}

    @property
    def what(self) -> tuple[str, ...]:
        """The stored quantity names."""
        return tuple(self.metadata["spec"]["what"])

    @property
    def dtype(self) -> str:
        """The stored output dtype (float32, float16, bfloat16 or uint8)."""
        return self.metadata["spec"]["dtype"]

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[Capture]:
        for i in range(len(self)):
            yield self[i]

    def __getitem__(self, index: int) -> Capture:
        if not isinstance(index, (int, np.integer)):
            raise TypeError(f"store indices are integers, got {type(index).__name__}")
        if not -len(self) <= index < len(self):
            raise IndexError(f"store index {index} out of range for {len(self)} examples")
        index = int(index) % len(self)
        entry, shard = self.entries[index], self._shard_of[index]
        reads = {}
        for q, (offset, shape) in entry.data.items():
            size = int(np.prod(shape))
            reads[q] = self._array(q, shard)[offset : offset + size].read()
        tensors = {
            q: layout.from_storage(f.result(), self.dtype, entry.data[q][1])
            for q, f in reads.items()
        }
        spec = self.metadata["spec"]
        return Capture(
            tokens=entry.tokens,
            sentence_b_start=entry.sentence_b_start,
            layers=tuple(spec["layers"]),
            heads=tuple(spec["heads"]),
            dtype=self.dtype,
            tensors=tensors,
            quantization=dict(entry.quantization),
            precision=spec.get("precision", "highest"),
        )

    def _array(self, quantity: str, shard: int):
        key = (quantity, shard)
        if key not in self._arrays:
            import tensorstore as ts

            spec = {
                "driver": "zarr3",
                "open": True,
                "kvstore": child_spec(self._root, layout.array_path(quantity, shard)),
            }
            self._arrays[key] = ts.open(spec, read=True, context=self._context).result()
        return self._arrays[key]

    def __repr__(self) -> str:
        spec = self.metadata["spec"]
        return (
            f"Store({self.location!r}, {len(self)} examples, model="
            f"{self.metadata['model']['name']}, what={spec['what']}, dtype={spec['dtype']}"
            f"{'' if self.complete else ', incomplete'})"
        )


def open_store(location: str | os.PathLike, *, partial: bool = False) -> Store:
    """Open a store written by `jaxattn dump` for reading.

    Args:
      location: the store directory, or a TensorStore kvstore URL (gs://...).
      partial: allow a store whose dump has not finished (only committed
        shards are visible).

    Returns:
      A `Store`: ``store[i]``, ``len(store)``, iteration, ``store.entries``.

    Raises:
      FileNotFoundError: there is no store at `location`.
      ValueError: the store is incomplete (unless partial) or of another format.
    """
    return Store(location, partial=partial)
