"""Writing one shard: its arrays through TensorStore, then its manifest part.

Examples arrive in the engine's order (grouped by length bucket), and are
appended to each quantity's shard array in that order; the manifest records
every example's offset, so the data need not follow input order. Appends are
buffered on the host and written in whole chunks, so TensorStore never reads a
chunk back to modify it; the writes are asynchronous and overlap with the
next batches' capture. `commit` waits for every write, then writes the
manifest part: a shard whose part exists is complete. An example the engine ran in
layer groups is written a group at a time (`ShardWriter.add` of its `CapturePart`s), so
the dump holds one group of it on the host, not all of it.
"""

from __future__ import annotations

import collections
import time
import types
from collections.abc import Sequence

import numpy as np

from jaxattn.capture import Capture
from jaxattn.capture.part import CapturePart
from jaxattn.store import layout
from jaxattn.store.kvstore import KeyValue, child_spec, store_context, tensorstore_errors
from jaxattn.store.manifest import Entry, ShardPart, Skipped

# Most bytes handed to TensorStore and not yet on disk; beyond it, appends wait.
_MAX_IN_FLIGHT = 256 << 20
# What to do when TensorStore fails to write: the shard is redone on resume.
_ADVICE = "fix the cause, then rerun the same command: it resumes at this shard"


class _Column:
    """One quantity's shard array, filled by appends, written in whole chunks."""

    def __init__(self, array, chunk: int, writes: collections.deque):
        self.array, self.chunk, self.writes = array, chunk, writes
        self.pending: list[np.ndarray] = []
        self.pending_size = 0  # elements buffered, not yet handed to TensorStore
        self.flushed = 0  # elements handed to TensorStore (a multiple of chunk until the end)

    def append(self, flat: np.ndarray) -> int:
        """Buffer `flat`; return its offset in the array."""
        offset = self.flushed + self.pending_size
        self.pending.append(flat)
        self.pending_size += flat.size
        if self.pending_size >= self.chunk:
            self.flush(final=False)
        return offset

    def flush(self, final: bool) -> None:
        if not self.pending_size:
            return
        data = np.concatenate(self.pending) if len(self.pending) > 1 else self.pending[0]
        n = data.size if final else data.size - data.size % self.chunk
        if n:
            # `data` is never modified again: TensorStore may keep it rather than copy it.
            future = self.array[self.flushed : self.flushed + n].write(
                data[:n], can_reference_source_data_indefinitely=True
            )
            self.writes.append((data[:n].nbytes, future))
            self.flushed += n
        rest = data[n:]
        self.pending, self.pending_size = ([rest], rest.size) if rest.size else ([], 0)


class ShardWriter:
    """Writes the arrays of one shard and commits its manifest part.

    Args:
      kv: the store root.
      meta: the store metadata (`jaxattn.store.metadata.build`).
      shard: the shard index.
      lengths: the token lengths of every example the shard will store (sizes
        the arrays exactly: no padding, nothing to resize).
      context: a tensorstore.Context shared by the job's writers (None: one of its
        own, `store_context`: the network stores' retries bounded).
    """

    def __init__(self, kv: KeyValue, meta: dict, shard: int, lengths: Sequence[int], context=None):
        import tensorstore as ts

        self.kv, self.meta, self.shard = kv, meta, shard
        self.operation = f"write shard {shard}"
        self.dtype = meta["spec"]["dtype"]
        self.sizes = meta["sizes"]
        self.what = tuple(meta["spec"]["what"])
        self.totals = {
            q: sum(layout.example_size(q, self.sizes, t) for t in lengths) for q in self.what
        }
        self.entries: dict[int, Entry] = {}
        self.bytes = 0
        self._writes: collections.deque = collections.deque()
        # The example whose layer groups are being written: {q: (offset, shape)}.
        self._open: dict | None = None
        self._in_flight = 0
        self._start = time.monotonic()
        context = store_context() if context is None else context
        opens = {}
        for q in self.what:
            array_meta = layout.array_metadata(
                length=self.totals[q], dtype=self.dtype, chunk_bytes=meta["chunk_bytes"], quantity=q
            )
            spec = {
                "driver": "zarr3",
                "kvstore": child_spec(kv.spec, layout.array_path(q, shard)),
                "metadata": array_meta,
                "create": True,
                # A killed attempt may have left chunks of this shard: start afresh.
                "delete_existing": True,
                # All-zero chunks too, so that a missing chunk file is damage the
                # reader can see (`layout.missing_chunks`), never silent zeros.
                "store_data_equal_to_fill_value": True,
            }
            opens[q] = (ts.open(spec, context=context), array_meta)
        self._columns = {}
        for q, (future, array_meta) in opens.items():
            chunk = array_meta["chunk_grid"]["configuration"]["chunk_shape"][0]
            with tensorstore_errors(kv.location, f"create the {q} array of shard {shard}", _ADVICE):
                array = future.result()
            self._columns[q] = _Column(array, chunk, self._writes)

    def add(
        self,
        cap: Capture | CapturePart,
        *,
        record: int,
        line: int,
        id: str,
        truncated: bool,
        text=None,
    ) -> int:
        """Append one example's tensors; returns the bytes it adds (uncompressed).

        `text` is the input text (or pair) the manifest keeps for readers. `cap` may
        be one layer group's `CapturePart` of an example the engine ran in groups:
        the parts of one example come in order, one after another, and each is
        written as it comes (the L axis leads, so a part's entries are the next
        stretch of the example's flat data); the example's manifest entry is made
        with its last part.

        Raises:
          RuntimeError: the capture does not match the store's spec, or a part out of
            order (a bug).
        """
        part = cap if isinstance(cap, CapturePart) else None
        fields = part.fields if part is not None else None
        length = len(fields["tokens"]) if part is not None else cap.length
        if part is not None and part.first != (self._open is None):
            raise RuntimeError(f"record {record}: layer group {part.part} out of order")
        data, added = ({} if self._open is None else self._open), 0
        for q in self.what:
            array = cap.tensors[q]
            shape = layout.example_shape(q, self.sizes, length)
            want = shape if part is None else (part.entries(q)[1] - part.entries(q)[0], *shape[1:])
            if array.shape != want:
                raise RuntimeError(
                    f"{q} of record {record} has shape {array.shape}, expected {want}"
                )
            flat = layout.to_storage(array, self.dtype)
            with tensorstore_errors(self.kv.location, self.operation, _ADVICE):
                offset = self._columns[q].append(flat)
            data.setdefault(q, (offset, shape))
            added += flat.nbytes
        self.bytes += added
        if part is not None and not part.last:
            self._open = data
            self._throttle()
            return added
        self._open = None
        if part is not None:
            cap = types.SimpleNamespace(**fields, quantization=part.quantization)
        self.entries[record] = Entry(
            record=record,
            line=line,
            id=id,
            tokens=tuple(cap.tokens),
            sentence_b_start=cap.sentence_b_start,
            truncated=truncated,
            text=text,
            generated_start=cap.generated_start,
            stop=cap.stop,
            data=data,
            quantization={q: tuple(v) for q, v in cap.quantization.items()},
        )
        self._throttle()
        return added

    def _throttle(self) -> None:
        # Completed writes leave the queue; too many bytes in flight wait here.
        self._in_flight = sum(n for n, _ in self._writes)
        while self._writes and (self._writes[0][1].done() or self._in_flight > _MAX_IN_FLIGHT):
            n, future = self._writes.popleft()
            with tensorstore_errors(self.kv.location, self.operation, _ADVICE):
                future.result()
            self._in_flight -= n

    def commit(
        self, records: tuple[int, int], skipped: Sequence[Skipped], stats: dict
    ) -> ShardPart:
        """Flush and wait for every write, then write the manifest part.

        Args:
          records: [start, stop) of the input records of the shard.
          skipped: the records left out.
          stats: informational numbers for the part.

        Returns:
          The committed part.
        """
        with tensorstore_errors(self.kv.location, self.operation, _ADVICE):
            for column in self._columns.values():
                column.flush(final=True)
            while self._writes:
                self._writes.popleft()[1].result()
        for q, column in self._columns.items():
            if column.flushed != self.totals[q]:
                raise RuntimeError(
                    f"shard {self.shard}: {q} got {column.flushed} elements, "
                    f"expected {self.totals[q]} (an example is missing)"
                )
        part = ShardPart(
            shard=self.shard,
            records=records,
            examples=tuple(self.entries[r] for r in sorted(self.entries)),
            skipped=tuple(sorted(skipped, key=lambda s: s.record)),
            sizes=dict(self.totals),
            stats={
                **stats,
                "bytes": self.bytes,
                "seconds": round(time.monotonic() - self._start, 3),
            },
        )
        attributes = {layout.MANIFEST_ATTRIBUTE: part.to_json()}
        manifest = layout.group_metadata(attributes)
        self.kv.write_json(layout.manifest_key(self.shard), manifest, _ADVICE)
        return part
