"""The host side of a batch: tokens -> padded arrays before the step, arrays -> Captures after.

`pack` lays a batch's examples into [B, T] numpy arrays (ids, token types,
mask). After the step, `host_blocks` turns each output into numpy views of the
host buffers the step wrote (per device shard, no concatenation), and `unpack`
cuts one `Capture` per real row out of them, as views: trimming to an
example's length copies nothing. A Capture therefore keeps its batch's block
alive; a consumer that only reads (the server's encoder, the dump writer, the
analyses) lets it go with the Capture, and the buffer returns to the pool.

Where the step's outputs live is the host memory policy (`step.HOST_MEMORY`):
in pinned host memory on GPUs/TPUs (measured on an H100 for issue 12, a
device-to-host copy into fresh pageable memory ran at ~1.8 GB/s, into pinned
memory at ~55; numpy then views the pinned buffer without a copy, as
jax-ml/jax#22114 reports: on an H200 a 1 GiB output in 0.06 ms at its own
address, BENCHMARKS.md), in device memory on the CPU,
where device memory is host memory and numpy views it in place (tested).
Capture arrays are therefore read-only; `np.array(cap.attention)` makes a
writable copy.

Pinned host memory comes, on GPUs, from XLA's pool (the allocator
`POOL_ALLOCATOR`, `POOL_LIMIT_ENV` GiB, 64 by default), and a Capture that views
it holds its batch's block there until it is let go. A call that keeps every
result (`Engine.capture`'s list) would fill the pool, so it holds them as
`HeldResults`: past a budget (`pinned_budget`: half the pool) of the blocks that
Captures still view (`PINNED_VIEWS`: every call's, earlier calls' and kept streams'
too, each until let go) each batch's Captures are copied into ordinary numpy
memory (`copied`) and the block goes back to the pool; and it is refused before
any capture runs where its results exceed the host's available memory
(`HeldResults.check`, `available_bytes`: MemAvailable, or less where a container's
memory cgroup leaves less).
Streams hand their results on and keep them pinned.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence

import jax
import numpy as np

from jaxattn import cpus
from jaxattn.capture import Capture, bulk, frozen
from jaxattn.capture.part import CapturePart
from jaxattn.config import ModelConfig
from jaxattn.dtypes import PROBABILITY_SCALE
from jaxattn.engine import map_positions
from jaxattn.engine.batching import Batch
from jaxattn.engine.tokenize import TokenizedText
from jaxattn.errors import HostMemoryError
from jaxattn.progress import human_bytes
from jaxattn.quantities import QUANTITIES, STATISTICS
from jaxattn.spec import CaptureSpec
from jaxattn.token_classes import class_bits

# XLA's pool of pinned host memory on GPUs: its allocator (named in its errors), the
# environment variable of its size in GiB, and that size unset (XLA's GetGpuHostAllocator).
POOL_ALLOCATOR = "xla_gpu_host_bfc"
POOL_LIMIT_ENV = "XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB"
POOL_DEFAULT_GB = 64
# The share of the pool a call's held results may keep pinned (`pinned_budget`).
POOL_SHARE = 0.5
GIB = 1 << 30


def _read_pool_gb(environ: Mapping[str, str]) -> int:
    """`POOL_LIMIT_ENV` of `environ` in GiB, else (unset or not an integer, which XLA
    logs and ignores) `POOL_DEFAULT_GB`."""
    try:
        return int(environ.get(POOL_LIMIT_ENV, POOL_DEFAULT_GB))
    except ValueError:
        return POOL_DEFAULT_GB


def backend_started() -> bool:
    """Whether jax's backends (the GPU's client, which sizes XLA's pinned pool, among
    them) have started; where this jax cannot say, that they have."""
    try:
        from jax._src import xla_bridge

        return xla_bridge.backends_are_initialized()
    except Exception:  # noqa: BLE001 - another jax: counted as started  # pragma: no cover
        return True


class PoolSize:
    """The size of XLA's pinned host pool as XLA took it: XLA reads `POOL_LIMIT_ENV`
    once, when the GPU's client starts, and a value set afterwards changes nothing but
    what jaxattn would read (its budget past XLA's pool: a full pool, HostMemoryError).
    So the variable is read once, the first time it is asked for after the backend
    started (as an engine is made, right after its first use of the devices, which
    starts the backend), and that value kept; a later change is warned of once, naming
    both values. Before the backend starts, the variable as it is now (what XLA will
    read). A value set after jax started but before jaxattn first looked cannot be told
    from one XLA read. The process's one: `POOL`."""

    def __init__(self):
        self.started_gb: int | None = None  # the value read once the backend ran
        self.warned = False
        self._lock = threading.Lock()

    def gb(self) -> int:
        now = _read_pool_gb(os.environ)
        with self._lock:
            if self.started_gb is None:
                if not backend_started():
                    return now
                self.started_gb = now
            elif now != self.started_gb and not self.warned:
                self.warned = True
                warnings.warn(
                    f"{POOL_LIMIT_ENV} is {os.environ.get(POOL_LIMIT_ENV, 'unset')!r} now, "
                    f"but XLA sized its pinned host pool when jax's backend started, at "
                    f"{self.started_gb} GiB: jaxattn keeps to {self.started_gb} GiB; set "
                    "the variable before jax starts (before jaxattn.load) to change the pool",
                    RuntimeWarning,
                    stacklevel=3,
                )
            return self.started_gb


POOL = PoolSize()


def pool_gb(environ: Mapping[str, str] | None = None) -> int:
    """The size of XLA's pinned host pool in GiB: `POOL_LIMIT_ENV` as XLA took it when
    jax's backend started (`PoolSize`, `POOL`), `POOL_DEFAULT_GB` where unset; of
    `environ` where given (nothing kept)."""
    return POOL.gb() if environ is None else _read_pool_gb(environ)


def pinned_budget(devices: Sequence, host_memory: str, environ=None) -> int | None:
    """Bytes of pinned output blocks a call that keeps its results may hold before it
    copies them out (`HeldResults`): `POOL_SHARE` of XLA's pool where the step's
    outputs land in pinned memory on GPUs; None (no limit) elsewhere: the CPU's
    outputs stay in its device memory, which is host memory, and no other pool is known."""
    if host_memory not in ("pinned", "staged") or not all(d.platform == "gpu" for d in devices):
        return None
    return int(pool_gb(environ) * GIB * POOL_SHARE)


def in_flight_room(pinned_budget: int | None, batches: int, environ=None) -> int | None:
    """Most output bytes each of `batches` blocks in flight (a pipeline's depth times
    the rows of a batch of one example: one a device) may hold so that they fit XLA's
    pool beside the `pinned_budget` a call that keeps its results holds there (at
    least 1); None where outputs do not land in the pool (no `pinned_budget`)."""
    if pinned_budget is None:
        return None
    return max(1, (pool_gb(environ) * GIB - pinned_budget) // batches)


# Where the host's available memory is read (`available_bytes`): the kernel's
# estimate for the whole machine, and the process's memory cgroups (a container's limit).
MEMINFO = "/proc/meminfo"
MEMINFO_SOURCE = "MemAvailable in /proc/meminfo"
# cgroup v1 writes "no limit" as the largest page-aligned counter (9223372036854771712
# with 4 KiB pages): a limit from here up is none.
CGROUP_V1_UNLIMITED = 1 << 62
# Each cgroup version's files: (its hierarchy under `cpus.CGROUP_ROOT`, the controller
# its line of /proc/self/cgroup names: none for v2's "0::/path", and at each level the
# limit, the usage and the key of memory.stat's inactive file cache, which the working
# set leaves out, as Kubernetes counts it).
CGROUP_FILES = (
    ("", "", "memory.max", "memory.current", "inactive_file"),
    ("memory", "memory", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"),
)


class Available(int):
    """Bytes of memory available to the process, and where that number comes from
    (`source`, as a refusal names it: `MEMINFO_SOURCE` or the cgroup limit that decided)."""

    source: str

    def __new__(cls, nbytes: int, source: str) -> Available:
        self = super().__new__(cls, nbytes)
        self.source = source
        return self


def meminfo_available(meminfo: str = MEMINFO) -> Available | None:
    """The machine's available memory (MemAvailable of /proc/meminfo), None where unknown."""
    try:
        with open(meminfo, encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return Available(int(line.split()[1]) * 1024, MEMINFO_SOURCE)  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def _level_headroom(
    level: str, limit_file: str, usage_file: str, inactive_key: str
) -> tuple[int, int, int] | None:
    """(headroom, limit, working set) at one cgroup directory, None where it sets no
    limit or a file is missing, unreadable or malformed."""
    try:
        limit = int(cpus.read(os.path.join(level, limit_file)))  # v2's "max" (none): ValueError
        if limit >= CGROUP_V1_UNLIMITED:
            return None
        usage = int(cpus.read(os.path.join(level, usage_file)))
        stat = dict(
            line.split() for line in cpus.read(os.path.join(level, "memory.stat")).splitlines()
        )
        working_set = max(0, usage - int(stat[inactive_key]))
    except (OSError, ValueError, KeyError, UnicodeDecodeError):
        return None
    return max(0, limit - working_set), limit, working_set


def cgroup_headroom(
    proc_cgroup: str | None = None, cgroup_root: str | None = None
) -> Available | None:
    """What the process's memory cgroups (a container's limit) leave it, None where no
    limit is known: the least, over cgroup v2 and v1 and every level from the process's
    cgroup up to the hierarchy's root that sets a limit, of the limit less the level's
    working set (its usage less its inactive file cache, as Kubernetes counts it).
    Levels that do not exist are passed over: inside a container the process's cgroup
    (as the host names it) is often the root of the hierarchy mounted there. The
    process's cgroups are found as its CPU quota's are (`cpus.cgroup_levels`)."""
    least = None
    for sub, controller, limit_file, usage_file, inactive_key in CGROUP_FILES:
        for level in cpus.cgroup_levels(controller, (sub,), proc_cgroup, cgroup_root):
            got = _level_headroom(level, limit_file, usage_file, inactive_key)
            if got is not None and (least is None or got[0] < least):
                headroom, limit, working_set = got
                least = Available(
                    headroom,
                    f"the container's memory limit (cgroup {os.path.join(level, limit_file)}: "
                    f"{human_bytes(limit)}, {human_bytes(working_set)} of it in use)",
                )
    return least


def available_bytes(
    meminfo: str = MEMINFO, proc_cgroup: str | None = None, cgroup_root: str | None = None
) -> Available | None:
    """The memory available to the process: the least of the machine's (MemAvailable,
    `meminfo_available`) and what its memory cgroups leave it (`cgroup_headroom`: a
    container's limit, which MemAvailable does not see); either alone where the other is
    unknown, None where both are. Its `source` names the one that decided."""
    sources = (meminfo_available(meminfo), cgroup_headroom(proc_cgroup, cgroup_root))
    known = [a for a in sources if a is not None]
    return min(known) if known else None  # a tie: MemAvailable


def copied(cap: Capture) -> Capture:
    """`cap` with arrays of its own in ordinary memory (read-only, as every Capture's),
    equal bit for bit: the batch block its arrays viewed is no longer held by it. A large
    array is copied on several threads (`bulk.copied`: the copy faults in fresh memory)."""
    tensors = {}
    for name, t in cap.tensors.items():
        own = bulk.copied(t)
        own.flags.writeable = False
        tensors[name] = own
    return dataclasses.replace(cap, tensors=tensors)


class PinnedViews:
    """Bytes of pinned output blocks that Captures still view (every call's, of every
    engine: the process has one pool; a stream's kept results too): each block counted
    as its Captures are handed over as views (`count`), until the last array viewing it
    is let go (a finalizer on each of its host arrays, `HostBlock.parts`). The
    process's one: `PINNED_VIEWS`."""

    def __init__(self):
        self.live = 0
        self._lock = threading.Lock()

    def count(self, blocks: Mapping[str, Mapping[str, HostBlock]]) -> int:
        """Count the host arrays of `blocks` until each is let go; their bytes."""
        total = 0
        for parts in blocks.values():
            for block in parts.values():
                for _, array in block.parts:
                    with self._lock:
                        self.live += array.nbytes
                    weakref.finalize(array, self._release, array.nbytes).atexit = False
                    total += array.nbytes
        return total

    def _release(self, nbytes: int) -> None:  # any thread: the collector's
        with self._lock:
            self.live -= nbytes


PINNED_VIEWS = PinnedViews()


class HeldResults:
    """The results of one call as it holds them: each batch's Captures kept as views of
    its pinned block while the blocks viewed come to at most `budget` bytes, copied out
    (`copied`) past it; None: all kept as views (a stream's, only counted). `views`: the
    process's views of pinned blocks (`PinnedViews`), earlier calls' included, that the
    budget is of and the blocks kept are counted in; None: this call's alone.

    Attributes:
      pinned: bytes of the blocks kept (padded: what the pool lends them).
      copied: bytes of the blocks whose Captures were copied out.
      viewed: bytes of the blocks kept that `views` counts (their host arrays').
    """

    def __init__(self, budget: int | None = None, views: PinnedViews | None = None):
        self.budget, self.views = budget, views
        self.pinned = self.copied = self.viewed = 0

    def keep(
        self, block_bytes: int, caps: Iterator[tuple[int, Capture]], blocks: Mapping | None = None
    ) -> Iterator:
        """The (position, Capture) pairs of one batch whose outputs are `block_bytes` (its
        host blocks: `blocks`), as this call holds them."""
        viewed = self.pinned if self.views is None else self.views.live
        if self.budget is None or viewed + block_bytes <= self.budget:
            self.pinned += block_bytes
            if self.views is not None and blocks is not None:
                self.viewed += self.views.count(blocks)
            yield from caps
            return
        self.copied += block_bytes
        for pos, cap in caps:
            yield pos, copied(cap)

    @staticmethod
    def check(results_bytes: int, available: Callable[[], int | None] = available_bytes) -> None:
        """Refuse a call whose results, `results_bytes` in all, exceed the host's
        available memory (`available()`; None: unknown, not refused).

        Raises:
          HostMemoryError: naming both and what to do instead.
        """
        free = available()
        if free is None or results_bytes <= free:
            return
        source = getattr(free, "source", MEMINFO_SOURCE)
        raise HostMemoryError(
            f"this call's results come to {human_bytes(results_bytes)} ({results_bytes} "
            f"bytes), more than the host's available memory ({human_bytes(free)}, {free} "
            f"bytes: {source}): take them as "
            "they come (capture_iter, stream, or jaxattn dump to a store), or capture "
            "fewer texts, quantities, layers or heads at a time"
        )


def pack(
    batch: Batch,
    tokenized: Sequence[TokenizedText],
    config: ModelConfig,
    spec: CaptureSpec | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
    """(ids, type_ids, mask, classes), each [batch.size, batch.length], of the batch's rows,
    and the maps' selected positions of each row (`map_positions.arrays`: {} without).

    classes holds `jaxattn.token_classes.class_bits` when `spec` asks for head
    statistics, zeros otherwise.
    """
    ids = np.full((batch.size, batch.length), config.pad_token_id, np.int32)
    type_ids = np.zeros((batch.size, batch.length), np.int32)
    classes = np.zeros((batch.size, batch.length), np.int8)
    rows = [tokenized[pos] for pos in batch.rows]
    lengths = [e.length for e in rows]
    # Each real row's first `length` columns, filled in one go from the rows' ids laid
    # end to end (a boolean index walks [B, T] row by row): no per-row conversion.
    mask = np.arange(batch.length) < np.array(lengths + [0] * (batch.size - len(rows)))[:, None]
    total = sum(lengths)
    ids[mask] = np.fromiter(itertools.chain.from_iterable(e.ids for e in rows), np.int32, total)
    if config.type_vocab_size:
        chained = itertools.chain.from_iterable(e.type_ids for e in rows)
        type_ids[mask] = np.fromiter(chained, np.int32, total)
    # The head statistics count attention to [CLS], [SEP] and punctuation.
    if spec is not None and set(STATISTICS) & set(spec.what):
        for r, e in enumerate(rows):
            classes[r, : e.length] = class_bits(e.tokens)
    # Dummy rows (a padded remainder): one real key, so their softmax stays
    # finite; their outputs are never read.
    mask[len(rows) :, 0] = True
    lengths += [None] * (batch.size - len(rows))
    positions = {} if spec is None else map_positions.arrays(spec, lengths)
    return ids, type_ids, mask, classes, positions


def start_copies(out: dict) -> None:
    """Start the device-to-host copy of outputs still in device memory (no-op elsewhere)."""
    for leaf in jax.tree.leaves(out):
        if leaf.sharding.memory_kind not in ("pinned_host", "unpinned_host"):
            for shard in leaf.addressable_shards:
                shard.data.copy_to_host_async()


class HostBlock:
    """One batched output [B, ...] on the host, as numpy views of its device shards."""

    def __init__(self, leaf: jax.Array):
        # Each shard's numpy view shares the buffer when it is host memory (CPU,
        # pinned host); from device memory it is the copy `start_copies` began.
        self.parts = sorted(
            ((s.index[0].start or 0, np.asarray(s.data)) for s in leaf.addressable_shards),
            key=lambda p: p[0],
        )

    def row(self, r: int) -> np.ndarray:
        """Row `r` of the batch (a view)."""
        for start, part in reversed(self.parts):
            if r >= start:
                return part[r - start]
        raise IndexError(r)


def host_blocks(out: dict) -> dict[str, dict[str, HostBlock]]:
    """The step's output {name: {"data", "scale", "offset"}} as HostBlocks (waits for it)."""
    return {name: {k: HostBlock(v) for k, v in parts.items()} for name, parts in out.items()}


class _Rows:
    """The per-length work of cutting a batch's rows, done once per length (issue 26):
    each quantity's trim and the maps' positions of an example of `length` tokens."""

    def __init__(self, blocks: dict, spec: CaptureSpec):
        self.blocks, self.spec = blocks, spec
        self._trims: dict[int, tuple] = {}
        self._positions: dict[int, dict] = {}

    def trims(self, length: int) -> tuple:
        """((name, its blocks, the index trimming a row to `length`), ...)."""
        got = self._trims.get(length)
        if got is None:
            got = self._trims[length] = tuple(
                (name, out, _trim(QUANTITIES[name], self.spec.token_sizes(name, length)))
                for name, out in self.blocks.items()
            )
        return got

    def positions(self, length: int) -> dict:
        got = self._positions.get(length)
        if got is None:
            got = self._positions[length] = self.spec.positions_of_example(length)
        return got

    def row(self, r: int, e: TokenizedText) -> tuple[dict, dict]:
        """(tensors, quantization) of row `r` of the batch, trimmed to example `e`."""
        tensors, quant = {}, {}
        uint8 = self.spec.dtype == "uint8"
        for name, out, trim in self.trims(e.length):
            tensors[name] = out["data"].row(r)[trim]
            if uint8:
                if "scale" in out:
                    quant[name] = (float(out["scale"].row(r)), float(out["offset"].row(r)))
                else:
                    quant[name] = (PROBABILITY_SCALE, 0.0)
        return tensors, quant

    def fields(self, e: TokenizedText, provenance: Mapping) -> dict:
        """The Capture fields of example `e` other than its tensors and quantization."""
        spec = self.spec
        return dict(
            tokens=e.tokens,
            sentence_b_start=e.sentence_b_start,
            layers=spec.layers,
            heads=spec.heads,
            kv_heads=spec.kv_heads,
            dtype=spec.dtype,
            precision=spec.precision,
            text=e.text,
            truncated=e.truncated,
            generated_start=e.generated_start,
            stop=e.stop,
            provenance=provenance,
            **self.positions(e.length),
        )


def _trim(q, sizes: dict) -> tuple:
    """The index of a row of quantity `q` keeping `sizes` of its token axes (a map's
    selected rows and keys: all real)."""
    token_axes = q.token_axes
    return tuple(
        slice(0, sizes[axis]) if i in token_axes else slice(None) for i, axis in enumerate(q.axes)
    )


def unpack(
    batch: Batch,
    blocks: dict,
    tokenized: Sequence[TokenizedText],
    spec: CaptureSpec,
    provenance: Mapping | None = None,
) -> Iterator[tuple[int, Capture]]:
    """(input position, Capture) of each real row of a batch, its arrays views of `blocks`.

    Args:
      batch: the batch the step ran.
      blocks: `host_blocks` of the step's output.
      tokenized: the examples `batch.rows` index into.
      spec: the spec the step ran.
      provenance: the read-only provenance every Capture shares (None: none).
    """
    provenance = frozen() if provenance is None else provenance
    rows = _Rows(blocks, spec)
    for r, pos in enumerate(batch.rows):
        e = tokenized[pos]
        tensors, quant = rows.row(r, e)
        yield pos, Capture(tensors=tensors, quantization=quant, **rows.fields(e, provenance))


def unpack_part(
    batch: Batch,
    blocks: dict,
    tokenized: Sequence[TokenizedText],
    spec: CaptureSpec,
    cuts: tuple[int, ...],
    part: int,
    provenance: Mapping | None = None,
) -> Iterator[tuple[int, CapturePart]]:
    """As `unpack`, for the outputs of one layer group (`jaxattn.engine.layer_groups`):
    (input position, `CapturePart` number `part` of the example, groups at `cuts`)."""
    provenance = frozen() if provenance is None else provenance
    rows = _Rows(blocks, spec)
    for r, pos in enumerate(batch.rows):
        e = tokenized[pos]
        tensors, quant = rows.row(r, e)
        fields = rows.fields(e, provenance)
        yield (
            pos,
            CapturePart(fields=fields, cuts=cuts, part=part, tensors=tensors, quantization=quant),
        )
