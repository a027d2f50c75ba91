"""`open_store`: random access to a finished store, one `Capture` per example.

Needs tensorstore and numpy, not jax: stores are read where the client runs.
A store is a sequence (`jaxattn.store.selection`: negative indices, lazy slices).
Each capture carries its provenance: the model the store's metadata records
(name, family, weights fingerprint, config) and the source ``store <path>``,
its text (the manifest keeps it; None in stores written before it did),
whether it was truncated, and where a decoder's continuation starts
(`Capture.generated_start`; None for a text captured as it is, and in stores
written before the field).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterator, Mapping, Sequence

from jaxattn.capture import Capture, frozen
from jaxattn.capture.shapes import layout_problem
from jaxattn.errors import CaptureFileError, UsageError
from jaxattn.info import ModelInfo, provenance
from jaxattn.selection import resolve_positions
from jaxattn.spec import check_kv_heads
from jaxattn.store import layout
from jaxattn.store import metadata as store_metadata
from jaxattn.store.kvstore import (
    KeyValue,
    child_spec,
    root_spec,
    store_context,
    tensorstore_errors,
)
from jaxattn.store.location import found_at
from jaxattn.store.manifest import Entry, ShardPart
from jaxattn.store.selection import StoreSelection, check_held, position

# Decoded chunks kept for reuse: iterating reads neighbouring examples from the same chunks.
_CACHE_BYTES = 64 << 20


def read_parts(kv: KeyValue, num_shards: int) -> dict[int, ShardPart]:
    """The committed manifest parts of a store, by shard.

    Raises:
      CaptureFileError: a part that is not a manifest part (naming its key).
    """
    parts = {}
    for key in kv.list(layout.MANIFEST_DIR + "/"):
        shard = layout.shard_of_manifest_key(key)
        if shard is not None and shard < num_shards:
            try:
                doc = kv.read_json(key)
            except CaptureFileError as e:  # not JSON: the way out, as below
                raise CaptureFileError(
                    f"{e}; delete it and rerun the dump command to redo shard {shard}"
                ) from None
            try:
                parts[shard] = ShardPart.from_json(doc["attributes"][layout.MANIFEST_ATTRIBUTE])
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
                raise CaptureFileError(
                    f"the store at {kv.location} is damaged: {key} is not a manifest part "
                    f"({type(e).__name__}: {e}); delete it and rerun the dump command to "
                    f"redo shard {shard}"
                ) from None
    return parts


def model_info(meta: Mapping, where: str) -> ModelInfo:
    """The `ModelInfo` a store's metadata records (older stores lack `weights`: "").

    Raises:
      CaptureFileError: a field of ModelInfo is missing (naming the store).
    """
    model = meta["model"]
    fields = {f.name for f in dataclasses.fields(ModelInfo)}
    try:
        return ModelInfo(**{k: v for k, v in model.items() if k in fields})
    except TypeError as e:
        raise CaptureFileError(
            f"the store at {where} is damaged: its model metadata does not fit ModelInfo ({e})"
        ) from None


def _kv_heads(meta: Mapping, info: ModelInfo, where: str) -> tuple[int, ...]:
    """The key/value head of each captured query head (spec.kv_heads; () without
    grouped-query attention and in stores written before the field).

    Raises:
      CaptureFileError: one past the model's num_key_value_heads (named with the limit),
        or not one per query head.
    """
    spec = meta["spec"]
    try:
        return check_kv_heads(spec.get("kv_heads") or (), info.kv_heads, spec["heads"], where)
    except (UsageError, TypeError, ValueError) as e:
        raise CaptureFileError(f"the store at {where} is damaged: {e}") from None


def _check_quantities(part: ShardPart, shard: int, what: Sequence[str], where: str) -> None:
    """Raise CaptureFileError when an entry of `part` (of `shard`) holds a quantity the
    store does not."""
    for entry in part.examples:
        extra = sorted(set(entry.data) - set(what))
        if extra:
            raise CaptureFileError(
                f"the store at {where} is damaged: {layout.manifest_key(shard)} gives "
                f"example {entry.record} {', '.join(extra)}, not among the store's quantities "
                f"({', '.join(what)}); delete it and rerun the dump command to redo the shard"
            )


class Store(Sequence):
    """A jaxattn store opened for reading (build it with `open_store`).

    ``store[i]`` is the i-th stored example in input order, as the `Capture`
    the engine returned for it (uint8 tensors with their quantisation, the
    provenance of the store's model, ``truncated`` and ``text``, which is None
    in stores written before the manifest kept texts). It is a sequence like a list: ``len(store)``,
    negative indices, iteration, and slices (``store[1:3]``, ``store[::2]``)
    that give a lazy `StoreSelection`, reading nothing until indexed.

    Attributes:
      metadata: the store metadata (model, spec, input, shards; see STORE.md).
      entries: the manifest entry of every stored example, in input order.
      parts: the committed manifest parts, by shard.
      complete: every shard of the input is committed.
      provenance: what every capture records about where it came from (read-only).
    """

    def __init__(self, location: str | os.PathLike, *, partial: bool = False):
        self.location = os.fspath(location)
        self._root = root_spec(location)
        self._kv = kv = KeyValue(self._root)
        meta = store_metadata.read(kv)
        if meta is None:
            raise CaptureFileError(
                f"{self.location} is not a jaxattn store: found {found_at(location)}"
                " (write one with jaxattn dump INPUT --out STORE)"
            )
        self.metadata = meta
        info = model_info(meta, self.location)
        self.kv_heads = _kv_heads(meta, info, self.location)
        made = provenance(info, meta["model"].get("config"), f"store {self.location}")
        # "jaxattn" is the version that captured: the one that wrote the store.
        self.provenance = frozen({**made, "jaxattn": meta.get("jaxattn_version", "unknown")})
        num_shards = meta["shards"]["count"]
        self.parts = read_parts(kv, num_shards)
        self.complete = len(self.parts) == num_shards
        if not self.complete and not partial:
            state = (
                f"the store at {self.location} is incomplete: {len(self.parts)} of "
                f"{num_shards} shards are done; rerun the jaxattn dump command that wrote it "
                "to finish it"
            )
            raise CaptureFileError(
                f"{state} (or open it with partial=True)",
                cli=f"{state} (the same command resumes where it stopped)",
            )
        self.entries: list[Entry] = []
        self._shard_of: list[int] = []
        for shard in sorted(self.parts):
            _check_quantities(self.parts[shard], shard, self.what, self.location)
            self.entries.extend(self.parts[shard].examples)
            self._shard_of.extend([shard] * len(self.parts[shard].examples))
        self._context = store_context(cache_pool={"total_bytes_limit": _CACHE_BYTES})
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
            yield self.read(i)

    def __getitem__(self, key) -> Capture | StoreSelection:
        """``store[i]``: one example (i may be negative or a numpy integer);
        ``store[a:b:c]``: a lazy `StoreSelection`.

        Raises:
          IndexError: naming the index and the valid range.
          TypeError: naming the key's type.
        """
        if isinstance(key, slice):
            return StoreSelection(self, range(len(self))[key])
        return self.read(position(key, len(self), "the store"))

    def select(self, what) -> StoreSelection:
        """A lazy selection of every example whose captures hold only the quantities `what`
        (the others are not read): ``store.select(("queries", "keys"))[3]``.

        Raises:
          UsageError: a quantity the store does not hold (naming it and what it holds).
        """
        return StoreSelection(self, range(len(self)), what)

    def read(self, index: int, what=None) -> Capture:
        """The example at `index` (negative counts from the end), read from its shard's
        arrays: every stored quantity, or only those in `what` (a name or names).

        Raises:
          IndexError: an index out of range, naming it and the valid range.
          TypeError: an index that is not an integer.
          UsageError: no quantity in `what`, or one the store does not hold.
          CaptureFileError: TensorStore cannot read the data (naming the store,
            the quantity and shard, and how to redo the shard).
        """
        index = position(index, len(self), "the store")
        entry, shard = self.entries[index], self._shard_of[index]
        if what is not None:
            what = check_held(self.location, self.what, what)
        reads = {}
        advice = (
            f"the shard's data is damaged or missing: delete {layout.manifest_key(shard)} "
            "and rerun the dump command to redo the shard"
        )
        for q, (offset, shape) in entry.data.items():
            if what is not None and q not in what:
                continue
            with tensorstore_errors(self.location, f"read {q} of shard {shard}", advice):
                size = math.prod(shape)
                reads[q] = self._array(q, shard)[offset : offset + size].read()
        tensors = {}
        for q, future in reads.items():
            with tensorstore_errors(self.location, f"read {q} of shard {shard}", advice):
                tensors[q] = layout.from_storage(future.result(), self.dtype, entry.data[q][1])
        spec = self.metadata["spec"]
        positions = self._positions(len(entry.tokens))
        problem = layout_problem(
            tokens=len(entry.tokens),
            layers=len(spec["layers"]),
            heads=len(spec["heads"]),
            kv_heads=self.kv_heads,
            shapes={q: t.shape for q, t in tensors.items()},
            **positions,
        )
        if problem:  # the manifest's shapes disagree with its example (a hand-edited store?)
            raise CaptureFileError(
                f"the store at {self.location} is damaged: example {index}: {problem}"
            )
        return Capture(
            tokens=entry.tokens,
            sentence_b_start=entry.sentence_b_start,
            layers=tuple(spec["layers"]),
            heads=tuple(spec["heads"]),
            kv_heads=self.kv_heads,
            dtype=self.dtype,
            tensors=tensors,
            quantization=dict(entry.quantization),
            precision=spec.get("precision", "highest"),
            truncated=entry.truncated,
            text=entry.text,
            generated_start=entry.generated_start,
            stop=entry.stop,
            provenance=self.provenance,
            **positions,
        )

    def _positions(self, length: int) -> dict:
        """The maps' query rows and key positions of an example of `length` tokens: the
        spec's (as asked, negative ones from its end) resolved against it; None: all."""
        spec = self.metadata["spec"]
        out = {}
        for field in ("query_positions", "key_positions"):
            asked = spec.get(field)
            try:
                out[field] = None if asked is None else resolve_positions(asked, length, field)
            except (UsageError, TypeError) as e:
                raise CaptureFileError(f"the store at {self.location} is damaged: {e}") from None
        return out

    def _array(self, quantity: str, shard: int):
        key = (quantity, shard)
        if key not in self._arrays:
            import tensorstore as ts

            path = layout.array_path(quantity, shard)
            spec = {"driver": "zarr3", "open": True, "kvstore": child_spec(self._root, path)}
            array = ts.open(spec, read=True, context=self._context).result()
            # Missing chunk files read as fill values: count them once per array.
            meta = array.spec().to_json()["metadata"]
            missing = layout.missing_chunks(meta, len(self._kv.list(path + "c/")))
            if missing:
                raise CaptureFileError(
                    f"the store at {self.location} is damaged: {missing} chunk file(s) of "
                    f"{quantity} of shard {shard} are missing (under {path}c/); delete "
                    f"{layout.manifest_key(shard)} and rerun the dump command to redo the shard"
                )
            self._arrays[key] = array
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
      A `Store`: a sequence of `Capture` (``store[i]``, ``store[-1]``, lazy
      ``store[1:3]``, ``len(store)``, iteration), ``store.entries``.

    Raises:
      CaptureFileError: no store at `location` (saying what is there), a
        damaged store, one of a format this jaxattn does not read, an
        incomplete one (unless partial), or data TensorStore cannot read.
    """
    return Store(location, partial=partial)
