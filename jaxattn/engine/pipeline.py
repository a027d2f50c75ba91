"""The batch half of the `Engine`: tokenised examples in, (position, Capture) out.

`BatchPipeline.run` plans the batches (`batching.plan_batches`), starts each
on the devices (`host.pack` -> `CaptureStep`, copies to the host begun at
once), keeps two in flight so one computes while the previous one's copy
lands, and cuts the finished blocks into per-example Captures (`host.unpack`).
A call that needs several shapes not compiled yet compiles them at once in
threads (`compile_threads`), each batch waiting only for its own shape.
A batch that runs out of device memory is run again in halves, and an example that
does not fit alone in layer groups (`oom`). A call that keeps every result hands
them over as `host.HeldResults` holds them (`holding`): copied out of pinned
memory past `pinned_budget`.
The `Engine` owns one and hands it, when made, everything it reads: the model
config, the `CaptureStep`, the devices, the bucket lengths, the `batching.Budgets`,
the `batching.ShapeLedger` of what is compiled, and the captures' provenance.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from jaxattn import quantities
from jaxattn.capture import Capture
from jaxattn.capture.part import Assembler, CapturePart
from jaxattn.config import ModelConfig
from jaxattn.cpus import usable as usable_cpus
from jaxattn.dtypes import OUTPUT_DTYPES
from jaxattn.engine import batching, host, layer_groups
from jaxattn.engine.oom import group_error, in_halves, out_of_memory, pool_exhausted, pool_full
from jaxattn.engine.step import CaptureStep
from jaxattn.engine.tokenize import TokenizedText
from jaxattn.errors import UsageError
from jaxattn.spec import CaptureSpec

# Batches in flight: one computing while the previous one's copy lands.
_PIPELINE_DEPTH = 2


def compile_threads(shapes: int, cpus: int | None = None) -> int:
    """Threads that compile `shapes` new shapes at once: half the CPUs the process may
    use (`jaxattn.cpus.usable`: a container's CPU quota counted), at most 8, never more
    than the shapes. XLA compiles with the GIL released, and on a GPU most of a shape's
    compile (GEMM autotuning, code generation) runs on the host; on a 2-core machine
    this is one thread, a compile already using both."""
    cpus = cpus or usable_cpus()
    return max(1, min(shapes, cpus // 2, 8))


def program(spec: CaptureSpec, ablated: bool) -> tuple:
    """The `batching.ShapeLedger` key of a compiled program: jit specialises on the
    spec, and heads ablated (gates given) are a program of their own."""
    return (spec, ablated)


def in_order(results: Iterable[tuple[int, object]]) -> Iterator:
    """The items of (position, item) pairs that come in any order, yielded in position
    order (0, 1, 2, ...), each as soon as it and all before it have come (`Engine.run`'s
    Captures come grouped by length bucket)."""
    ready: dict[int, object] = {}
    following = 0
    for pos, item in results:
        ready[pos] = item
        while following in ready:
            yield ready.pop(following)
            following += 1


class BatchPipeline:
    """Run tokenised examples through the capture step in batches (see the module doc).

    Args:
      config: the model config (`host.pack` reads it, ablation gates are sized by it).
      step: the jitted `CaptureStep` (or anything that places, calls and compiles
        like it); replaceable as `step`.
      devices: the devices the step runs on (batches are a multiple of their number).
      buckets: the bucket lengths, ascending (`batching.buckets_for`).
      budgets: the batch budgets (`batching.Budgets`).
      shapes: the ledger of compiled programs and rented padding (`batching.ShapeLedger`).
      provenance: called once per batch for the read-only provenance every Capture
        shares; a callable, so that what it costs (the weights' fingerprint) is paid
        only when a capture needs it.
    """

    def __init__(
        self,
        config: ModelConfig,
        step: CaptureStep,
        devices: Sequence,
        buckets: Sequence[int],
        budgets: batching.Budgets,
        shapes: batching.ShapeLedger,
        provenance: Callable[[], Mapping],
    ):
        self.config = config
        self.step = step
        self.devices = tuple(devices)
        self.buckets = tuple(buckets)
        self.budgets = budgets
        self.shapes = shapes
        self._provenance = provenance
        # Sizes asked per request several times (the server's limits, its admission,
        # the plan): remembered per (spec, length), a bounded number of them.
        self._output_bytes = functools.lru_cache(maxsize=4096)(self._size)
        # Threads compiling a call's new shapes (None: `compile_threads` of the host).
        self.compile_threads: int | None = None
        # When an example runs in layer groups, of how many layers (`layer_groups`).
        self.group_policy = layer_groups.GroupPolicy()
        # Batches (or layer groups) in flight: dispatched, their outputs not yet
        # handed over. Two: one computes while the last one's copy lands. More keeps
        # the device's queue fuller (a copy of its own per batch on GPUs: staged
        # outputs) for as many batches' outputs more held in device memory.
        self.depth = _PIPELINE_DEPTH
        # Bytes of pinned output blocks a call that keeps its results (`holding`) may
        # hold before it copies them out: half of XLA's pinned pool on GPUs, None (no
        # limit) where outputs do not land in it (`host.pinned_budget`).
        self.pinned_budget = host.pinned_budget(self.devices, step.host_memory)
        # One example's outputs as one program (`Budgets.example_bytes`: an eighth of the
        # free device memory, uncapped) land in the same pool, `depth` batches of one
        # example a device at once: at most what the pool has beside the held budget
        # (past it the example runs in layer groups), or the pool runs out mid-call.
        room = host.in_flight_room(self.pinned_budget, self.depth * len(self.devices))
        if room is not None and (budgets.example_bytes or 0) > room:
            self.budgets = dataclasses.replace(budgets, example_bytes=room)
        # The pinned blocks Captures still view, every call's (`host.PINNED_VIEWS`, the
        # process's): what the budget is of (one call keeping half the pool and the next
        # another half filled it).
        self.pinned_views = host.PINNED_VIEWS
        # The host's available memory now (None: unknown), that such a call must fit.
        self.available_bytes: Callable[[], int | None] = host.available_bytes

    @property
    def provenance(self) -> Mapping:
        """The read-only provenance every Capture shares."""
        return self._provenance()

    def run(
        self,
        tokenized: Sequence[TokenizedText],
        spec: CaptureSpec,
        ablation=None,
        *,
        parts: bool = False,
        group_bytes: int | None = None,
        skip: Callable[[int], bool] | None = None,
        held: host.HeldResults | None = None,
    ) -> Iterator[tuple[int, Capture | CapturePart]]:
        """Capture tokenised examples, yielding (position, Capture) as batches finish.

        Examples come grouped by length bucket, not in input order. Dispatch is
        asynchronous: batch k+1 computes while batch k is copied and trimmed.
        `ablation` (a `jaxattn.engine.HeadAblation`) disables heads; every
        ablation set runs the same compiled program. A batch that does not fit
        the device's memory is run again in halves; an example that does not fit
        alone as one program, in layer groups halved until they fit (`oom`).

        An example whose outputs exceed the example budget (`Budgets.group_bytes`: the
        output budget, on a GPU/TPU an eighth of its free memory, on a GPU at most what
        XLA's pinned pool has room for in flight; or `group_bytes`, where
        smaller) runs in layer groups, one example at a time, after the others
        (`group_policy`, `jaxattn.engine.layer_groups`): with `parts` its groups come
        as (position, `CapturePart`) in order as each lands, else its Capture once
        the last has. `skip(position)`: None, or asked before each layer group is
        dispatched: once True, that example's remaining groups are not computed and
        nothing more of it comes (its reader left: a server's cancelled call).
        `held`: how the call holds its Captures (`holding`); None: as views of the
        pinned blocks, counted only (a stream's).

        Raises:
          DeviceMemoryError: one example alone does not fit the device, not even in
            groups of one captured layer; or a layer group of one that the budget
            put in groups does not (named, not retried: its parts may have gone).
          HostMemoryError: XLA's pinned host pool is full (`oom.pool_full`).
        """
        gates = None if ablation is None else ablation.gates(self.config)
        held = host.HeldResults(views=self._views()) if held is None else held
        sizes = self.group_sizes(tokenized, spec, group_bytes)
        whole = [p for p, size in enumerate(sizes) if not size]
        if len(whole) == len(tokenized):
            yield from self._run_whole(tokenized, spec, gates, held)
        elif whole:
            kept = [tokenized[p] for p in whole]
            for i, cap in self._run_whole(kept, spec, gates, held):
                yield whole[i], cap
        for pos, size in enumerate(sizes):
            if size:
                yield from self.run_groups(tokenized, spec, gates, pos, size, parts, skip)

    def group_sizes(
        self, tokenized: Sequence[TokenizedText], spec: CaptureSpec, group_bytes=None
    ) -> list[int]:
        """Layers per group of each example (`layer_groups.GroupPolicy`), 0: one program."""
        sizes: dict[int, int] = {}  # by length: a call's examples share a few
        for e in tokenized:
            if e.length not in sizes:
                sizes[e.length] = self._group_size(spec, self._bucket(e.length), group_bytes)
        return [sizes[e.length] for e in tokenized]

    def _bucket(self, length: int) -> int:
        return next((b for b in self.buckets if b >= length), length)

    def _group_size(self, spec: CaptureSpec, length: int, group_bytes=None) -> int:
        budget = self.budgets.group_bytes
        if group_bytes:
            budget = min(budget, group_bytes)
        return self.group_policy.size(spec, length, self.output_bytes, budget)

    def part_bytes(self, spec: CaptureSpec, length: int, group_bytes: int | None = None) -> int:
        """Output bytes of the most one example padded to `length` hands over at once:
        its largest layer group's where it runs in groups (`group_sizes`, groups within
        `group_bytes` where given), else all of its outputs (`output_bytes`)."""
        size = self._group_size(spec, length, group_bytes)
        return self.output_bytes(layer_groups.first_layers(spec, size) if size else spec, length)

    def run_groups(self, tokenized, spec, gates, pos, size, parts, skip=None) -> Iterator[tuple]:
        """One example in layer groups of `size` captured layers: group g+1 dispatched
        while group g's outputs copy to the host, at most two groups' outputs held;
        stopped, what is in flight dropped, once `skip(pos)` says so (`run`)."""
        batch = batching.Batch(self._bucket(tokenized[pos].length), len(self.devices), (pos,))
        groups = layer_groups.groups_of(spec, size)
        cuts = layer_groups.cuts(groups)
        arrays = self.step.place(*host.pack(batch, tokenized, self.config, spec))
        assembler = Assembler()
        pending: collections.deque = collections.deque()
        provenance = self.provenance

        def named(part, error) -> Exception:
            """A group that ran out of device memory: not retried, named (`oom.group_error`;
            XLA's pinned host pool: `oom.pool_full`)."""
            if pool_exhausted(error):
                return pool_full(error, None)
            length = tokenized[pos].length
            return group_error(length, spec, groups[part], part, len(groups), error)

        def finish(part, out):
            try:
                blocks = host.host_blocks(out)  # waits for the group's copy
            except Exception as e:
                if not out_of_memory(e):
                    raise
                raise named(part, e) from None
            for row, got in host.unpack_part(
                batch, blocks, tokenized, spec, cuts, part, provenance
            ):
                if parts:
                    yield row, got
                else:
                    cap = assembler.add(row, got)
                    if cap is not None:
                        yield row, cap

        x = None
        for part, group in enumerate(groups):
            if skip is not None and skip(pos):
                return  # no one wants the rest of it
            try:
                out, x = self.step.group(spec, group.span, x, *arrays, gates)
            except Exception as e:
                if not out_of_memory(e):
                    raise
                raise named(part, e) from None
            host.start_copies(out)
            pending.append((part, out))
            if len(pending) >= self.depth:
                yield from finish(*pending.popleft())
        while pending:
            yield from finish(*pending.popleft())

    def _run_whole(
        self, tokenized: Sequence[TokenizedText], spec: CaptureSpec, gates, held
    ) -> Iterator[tuple[int, Capture]]:
        """`run` of examples that each run as one program, in batches, held as `held`."""
        args = (tokenized, spec, gates, held)
        plan = self.plan(tokenized, spec, self.budgets, ablated=gates is not None)
        pending: collections.deque = collections.deque()
        ahead = self._compile_ahead(spec, plan) if gates is None else None
        try:
            for batch in plan:
                if ahead is not None:
                    ahead.wait(batch)
                try:
                    pending.append((batch, self.dispatch(batch, tokenized, spec, gates)))
                except Exception as e:
                    if not out_of_memory(e):
                        raise
                    yield from self._drain(pending, *args)  # free what is in flight first
                    yield from in_halves(self, batch, tokenized, spec, gates, e, held)
                if len(pending) >= self.depth:
                    yield from self._finish(*pending.popleft(), *args, pending)
            yield from self._drain(pending, *args)
        finally:
            if ahead is not None:
                ahead.close()

    def plan(self, tokenized, spec, budgets=None, ablated=False) -> list[batching.Batch]:
        """The batches `run` gives tokenised examples under `spec` now (budgets: the
        engine's; ablated: heads disabled, a program of its own)."""
        lengths, budgets = [e.length for e in tokenized], budgets or self.budgets
        return batching.plan_batches(
            lengths,
            self.buckets,
            lambda t: self.output_bytes(spec, t),
            budgets,
            attention_bytes_per_example=lambda t: self.attention_bytes(spec, t, ablated),
            devices=len(self.devices),
            ledger=self.shapes,
            key=program(spec, ablated),
        )

    def dispatch(self, batch, tokenized, spec, gates=None):
        """Start one batch on the devices (asynchronously); its output, copies begun.
        The shape is then compiled, and the padding it rented is charged."""
        arrays = self.step.place(*host.pack(batch, tokenized, self.config, spec))
        out = self.step(spec, *arrays, gates)
        key = program(spec, gates is not None)
        self.shapes.charge(key, batch)
        self.shapes.add(key, batch.length, batch.size)
        host.start_copies(out)
        return out

    def _finish(
        self, batch, out, tokenized, spec, gates, held, pending
    ) -> Iterator[tuple[int, Capture]]:
        try:
            blocks = host.host_blocks(out)  # waits: an asynchronous failure surfaces here
        except Exception as e:
            if not out_of_memory(e):
                raise
            del out
            yield from self._drain(pending, tokenized, spec, gates, held)  # free what is in flight
            yield from in_halves(self, batch, tokenized, spec, gates, e, held)
            return
        yield from self.hand_over(batch, blocks, tokenized, spec, held)

    def _drain(self, pending, tokenized, spec, gates, held) -> Iterator[tuple[int, Capture]]:
        while pending:
            yield from self._finish(*pending.popleft(), tokenized, spec, gates, held, pending)

    def hand_over(
        self, batch, blocks, tokenized, spec, held: host.HeldResults | None
    ) -> Iterator[tuple[int, Capture]]:
        """(position, Capture) of each real row of a finished batch (`host.unpack`), as
        `held` holds them (None: views of the block)."""
        caps = host.unpack(batch, blocks, tokenized, spec, self.provenance)
        if held is None:
            return caps
        return held.keep(batch.size * self.output_bytes(spec, batch.length), caps, blocks)

    def holding(self, tokenized: Sequence[TokenizedText], spec: CaptureSpec) -> host.HeldResults:
        """How a call that keeps every Capture of `tokenized` under `spec` holds them
        (`run`'s `held`): copied out of pinned memory past `pinned_budget`.

        Raises:
          HostMemoryError: their outputs, trimmed to each example, exceed the host's
            available memory (`available_bytes`), before anything runs.
        """
        total = sum(self.output_bytes(spec, e.length) for e in tokenized)
        host.HeldResults.check(total, self.available_bytes)
        return host.HeldResults(self.pinned_budget, self._views())

    def _views(self) -> host.PinnedViews | None:
        """`pinned_views` where outputs land in XLA's pinned pool (a `pinned_budget`), else
        None: nothing to count (the CPU's outputs, device memory's copies)."""
        return None if self.pinned_budget is None else self.pinned_views

    def warmup(
        self, spec: CaptureSpec, sizes: str = "all", stop=None, group_bytes: int | None = None
    ) -> int:
        """Compile the shapes of `spec` before the first call; returns `compiled_shapes`
        (every program the step has made so far, not only these).

        sizes: "all", every (bucket, batch size) of the ladder: nothing compiles
        after, and every batch runs its tight plan. "largest", the largest batch
        size of each bucket only (one shape per bucket, for devices where a
        compile costs seconds, as on a GPU): a bucket's part-filled batch then
        pads into a compiled size, its padding rented against compiling smaller
        sizes until it has cost one compile (`batching.ShapeLedger.pad_into`).
        Shapes are compiled ahead of time, not run (`CaptureStep.compile`); inputs
        go through the same `host.pack` and `CaptureStep.place` as real batches:
        the jit cache keys on argument types; several shapes compile at once in
        threads (`compile_threads`). `stop`: None, or a callable asked before
        each shape; once it returns True no further shape starts (a server told
        to stop while it warms up).

        A bucket whose examples run in layer groups (`group_sizes`, with `group_bytes`
        as `run`'s: a server gives its per-example limit) compiles its group programs
        instead (`CaptureStep.compile_groups`; scanned, alike groups share one), as one
        shape: its examples never run as one program.

        Raises:
          UsageError: an unknown `sizes`.
        """
        if sizes not in batching.WARMUP_SIZES:
            valid = ", ".join(batching.WARMUP_SIZES)
            raise UsageError(f"unknown warmup sizes {sizes!r}: valid are {valid}")
        if sizes == "largest":
            self.shapes.pad_into.add(program(spec, False))
        shapes, grouped = [], []
        for length in self.buckets:
            size = self._group_size(spec, length, group_bytes)
            if size:
                grouped.append((length, size))
                continue
            largest = batching.batch_size(
                length,
                lambda t: self.output_bytes(spec, t),
                self.budgets,
                lambda t: self.attention_bytes(spec, t),
            )
            ladder = batching.ladder(largest, self.budgets.size_step)
            shapes += [
                (length, size * len(self.devices))
                for size in ladder[: len(ladder) if sizes == "all" else 1]
            ]
        stopped = threading.Event()

        def told_to_stop() -> bool:  # asked until it says stop, then stopped for good
            if stop is not None and not stopped.is_set() and stop():
                stopped.set()
            return stopped.is_set()

        threads = self.compile_threads or compile_threads(len(shapes) + len(grouped))
        with ThreadPoolExecutor(threads, thread_name_prefix="jaxattn-compile") as pool:
            done = [pool.submit(self._compile, spec, t, n, told_to_stop) for t, n in shapes]
            groups = [pool.submit(self._compile_groups, spec, *g, told_to_stop) for g in grouped]
        for compiled in groups:
            compiled.result()  # its errors, if any
        for (length, n), compiled in zip(shapes, done, strict=True):
            if compiled.result():
                self.shapes.add(program(spec, False), length, n)
        return self.compiled_shapes

    def _compile(self, spec: CaptureSpec, length: int, n: int, stop=None) -> bool:
        """Compile the (spec, [n, length]) program ahead of time, unless `stop()` says
        not to (then False). Inputs go through `host.pack` and `CaptureStep.place`
        as real batches do: the jit cache keys on argument types."""
        if stop is not None and stop():
            return False
        # Every row a dummy one: a real example would have to hold the spec's query and
        # key positions (`map_positions.arrays`), and the program is the same.
        batch = batching.Batch(length, n, ())
        self.step.compile(spec, *self.step.place(*host.pack(batch, [], self.config, spec)))
        return True

    def _compile_groups(self, spec: CaptureSpec, length: int, size: int, stop=None) -> bool:
        """Compile the layer-group programs of one example padded to `length` in groups
        of `size` (`run_groups`'s batch: one row a device), unless `stop()` says not to."""
        if stop is not None and stop():
            return False
        batch = batching.Batch(length, len(self.devices), ())
        spans = [g.span for g in layer_groups.groups_of(spec, size)]
        arrays = self.step.place(*host.pack(batch, [], self.config, spec))
        self.step.compile_groups(spec, spans, *arrays)
        return True

    def _compile_ahead(self, spec: CaptureSpec, plan) -> _CompilingAhead | None:
        """Start compiling the plan's new shapes in threads, where there are several
        and more than one thread; None where batches compile as they dispatch."""
        key = program(spec, False)
        new = sorted(
            {(b.length, b.size) for b in plan}
            - {(t, n) for k, t, n in self.shapes.compiled if k == key}
        )
        if len(new) < 2:  # before `compile_threads`, which reads the cgroup files
            return None
        threads = self.compile_threads or compile_threads(len(new))
        if threads < 2:
            return None
        pool = ThreadPoolExecutor(threads, thread_name_prefix="jaxattn-compile")
        return _CompilingAhead(
            pool, {shape: pool.submit(self._compile, spec, *shape) for shape in new}
        )

    @property
    def compiled_shapes(self) -> int:
        """How many (spec, shape) programs the step has compiled so far."""
        return self.step.compiled_shapes

    def output_bytes(self, spec: CaptureSpec, length: int) -> int:
        """Bytes one example padded to `length` returns under `spec`."""
        return self._output_bytes(spec, length)

    def _size(self, spec: CaptureSpec, length: int) -> int:
        c = self.config
        sizes = dict(L=len(spec.layers), H=len(spec.heads), K=c.head_dim, D=c.hidden_size)
        if spec.kv_axis:  # grouped-query attention: keys and values hold G heads, not H
            sizes["G"] = len(spec.kv_axis)
        item = OUTPUT_DTYPES[spec.dtype].itemsize
        return (
            sum(
                quantities.size(name, {**sizes, **spec.token_sizes(name, length)})
                for name in spec.what
            )
            * item
        )

    def attention_bytes(self, spec: CaptureSpec, length: int, ablated: bool = False) -> int:
        """Attention working memory of one example padded to `length` under `spec`
        (`batching.Budgets.attention_bytes`): one layer's float32 logits, [H, T, T]
        on the dense path, [H, block, block] on the blockwise one (what else the
        blockwise path holds grows linearly in T, as the token budget counts).

        Raises:
          UsageError: attention="blockwise" and `spec` cannot run blockwise
            (`CaptureStep.block_for`).
        """
        block_for = getattr(self.step, "block_for", None)  # a stand-in step: dense
        block = block_for(spec, length, ablated) if block_for is not None else 0
        side = min(block, length) if block else length
        return self.config.num_heads * side * side * 4


class _CompilingAhead:
    """A call's new shapes compiling in threads: `wait` for a batch's own shape,
    `close` when the call ends (shapes not started are dropped)."""

    def __init__(self, pool: ThreadPoolExecutor, futures: dict[tuple[int, int], Future]):
        self._pool, self._futures = pool, futures

    def wait(self, batch: batching.Batch) -> None:
        future = self._futures.get((batch.length, batch.size))
        if future is not None and future.exception() is not None:
            # The dispatch compiles the shape again and reports the failure where a
            # batch's failures are handled (device memory: run in halves).
            self._futures.pop((batch.length, batch.size))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
