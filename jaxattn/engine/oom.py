"""Batches that run out of device memory: run again in halves, never a crash.

A device's free memory is estimated when batches are sized
(`batching.Budgets.for_devices`), but activations, fragmentation and other
programs can still make XLA fail with RESOURCE_EXHAUSTED. The engine then runs
that batch as batches of at most half its size, recursively. XLA's pool of
pinned host memory (`host.POOL_ALLOCATOR`, 64 GiB by default on GPUs) failing
is another matter (`pool_exhausted`): what fills it is the results the caller
holds, which halving cannot free, so it is a `HostMemoryError` at once
(`pool_full`), naming the pool and the results' bytes (but a lone example past
the batch budget, run as one program under the larger example budget, runs in
layer groups, as it would have under the batch budget). An example that
does not fit alone as one program runs in layer groups (`in_groups`:
`jaxattn.engine.layer_groups`, whose programs hold only their layers' outputs),
each try's groups half the size of the last, down to one captured layer; only
an example that does not fit even so is an error (`DeviceMemoryError`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator

import jax

from jaxattn.capture import Capture
from jaxattn.engine import host
from jaxattn.errors import DeviceMemoryError, HostMemoryError
from jaxattn.progress import human_bytes

log = logging.getLogger("jaxattn.engine")


def out_of_memory(error: BaseException) -> bool:
    """Whether XLA failed for want of device memory (a batch too large), not a bug."""
    text = str(error)
    return isinstance(error, jax.errors.JaxRuntimeError) and (
        "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()
    )


def pool_exhausted(error: BaseException) -> bool:
    """Whether XLA failed for want of pinned host memory (its pool, `host.POOL_ALLOCATOR`:
    "Out of host memory ... with allocator xla_gpu_host_bfc"), not device memory."""
    text = str(error)
    return out_of_memory(error) and (
        "out of host memory" in text.lower() or host.POOL_ALLOCATOR in text
    )


def pool_full(error: BaseException, held: host.HeldResults | None) -> HostMemoryError:
    """The error of XLA's pinned host pool exhausted (`pool_exhausted`) during a call
    whose results are `held` (None: not counted)."""
    holds = ""
    if held is not None:
        holds = f"; this call's results hold up to {human_bytes(held.pinned)} of it"
        if held.copied:
            holds += f" (and {human_bytes(held.copied)} more, copied out of it)"
        earlier = 0 if held.views is None else held.views.live - held.viewed
        if earlier > 0:  # what a notebook still holds of its earlier captures and streams
            holds += f"; Captures kept from earlier calls view {human_bytes(earlier)} more"
    return HostMemoryError(
        f"XLA's pinned host memory pool ({host.POOL_ALLOCATOR}, {host.pool_gb()} GiB: "
        f"{host.POOL_LIMIT_ENV}) is full{holds} ({first_line(error)}): smaller batches "
        "cannot free it; take the results as they come (capture_iter, stream, or jaxattn "
        f"dump to a store) instead of holding them all, or raise {host.POOL_LIMIT_ENV} "
        "in a new process (XLA reads it as jax starts)"
    )


def in_halves(
    pipeline, batch, tokenized, spec, gates, error, held=None
) -> Iterator[tuple[int, Capture]]:
    """Run a batch that ran out of device memory as batches of at most half its size,
    through `pipeline` (a `jaxattn.engine.pipeline.BatchPipeline`), its Captures as
    `held` holds them (`BatchPipeline.hand_over`).

    A batch of one example a device that filled XLA's pinned host pool with outputs
    past the batch budget (`Budgets.output_bytes`: it ran as one program under the
    larger example budget) runs in layer groups instead (`in_groups`), as it would
    have under the batch budget.

    Raises:
      HostMemoryError: the memory that ran out was XLA's pinned host pool (`pool_full`).
    """
    per_device = batch.size // len(pipeline.devices)
    if pool_exhausted(error):
        if per_device <= 1 and _past_batch_budget(pipeline, spec, batch.length):
            yield from in_groups(pipeline, batch, tokenized, spec, gates, error)
            return
        raise pool_full(error, held) from error
    if per_device <= 1:
        yield from in_groups(pipeline, batch, tokenized, spec, gates, error)
        return
    log.warning(
        "a batch of %d x %d tokens ran out of memory (%s); running it in halves",
        batch.size,
        batch.length,
        first_line(error),
    )
    half = dataclasses.replace(
        pipeline.budgets, max_batch=per_device // 2, pad_fraction=0.0, compile_tokens=0
    )
    rows = [tokenized[pos] for pos in batch.rows]
    for sub in pipeline.plan(rows, spec, half, ablated=gates is not None):
        try:
            blocks = host.host_blocks(pipeline.dispatch(sub, rows, spec, gates))
        except Exception as e:
            if not out_of_memory(e):
                raise
            done = in_halves(pipeline, sub, rows, spec, gates, e, held)
            yield from ((batch.rows[p], cap) for p, cap in done)
            continue
        done = pipeline.hand_over(sub, blocks, rows, spec, held)
        yield from ((batch.rows[p], cap) for p, cap in done)


def _past_batch_budget(pipeline, spec, length: int) -> bool:
    """Whether one example's outputs exceed the batch budget and it can run in groups."""
    fits = pipeline.output_bytes(spec, length) <= pipeline.budgets.output_bytes
    return not fits and bool(pipeline.group_policy.fallback(spec))


def in_groups(pipeline, batch, tokenized, spec, gates, error) -> Iterator[tuple[int, Capture]]:
    """Run the examples of a batch of one a device, which ran out of device memory as
    one program, in layer groups (`BatchPipeline.run_groups`, whole Captures): first
    `GroupPolicy.fallback`'s size, then half of the last size that did not fit, down
    to one captured layer.

    Raises:
      DeviceMemoryError: an example cannot run in groups (one captured layer, affine
        uint8, the engine's layer_group=0), or does not fit even in groups of one.
    """
    first = pipeline.group_policy.fallback(spec)
    if not first:
        raise _too_large(batch, spec, error, "", "quantities, layers or heads") from None
    log.warning(
        "an example of %d tokens ran out of memory as one program (%s); running it in "
        "layer groups of %d captured layers",
        batch.length,
        first_line(error),
        first,
    )
    for row in batch.rows:
        size = first
        while True:
            try:  # the whole Capture, once its last group has landed
                done = list(pipeline.run_groups(tokenized, spec, gates, row, size, parts=False))
                break
            except DeviceMemoryError:
                if size == 1:
                    raise _too_large(
                        batch,
                        spec,
                        error,
                        ", not even in layer groups of one captured layer",
                        "quantities or heads",
                    ) from None
                size //= 2
                log.warning("layer groups did not fit either; trying groups of %d", size)
        yield from done


def _too_large(batch, spec, error, tried: str, fewer: str) -> DeviceMemoryError:
    """An example that does not fit the device alone (`tried`: what else did not help)."""
    return DeviceMemoryError(
        f"an example of {batch.length} tokens does not fit the device's memory even "
        f"alone, capturing {', '.join(spec.what)}{tried} ({error}): capture fewer "
        f"{fewer}, or shorter texts"
    )


def first_line(error: BaseException) -> str:
    """The first line of an error's message (at most 200 characters), or its class name."""
    text = str(error).strip()
    return text.splitlines()[0][:200] if text else type(error).__name__


def group_error(length: int, spec, group, part: int, parts: int, error) -> DeviceMemoryError:
    """The error of layer group `part` (of `parts`) of one example of `length` tokens run
    in layer groups (`jaxattn.engine.layer_groups`) that ran out of device memory.

    Not retried: a grouped example is one already, and its groups hold the hidden
    state between them, so the error names the group, its layers, and what helps."""
    captured = spec.layers[group.first : group.first + group.count]
    fewer = "a smaller layer_group (Engine(layer_group=1)), " if group.count > 1 else ""
    return DeviceMemoryError(
        f"layer group {part + 1} of {parts} (layers {group.start}-{group.stop - 1}, "
        f"capturing {', '.join(map(str, captured))}) of an example of {length} tokens "
        f"does not fit the device's memory, capturing {', '.join(spec.what)} ({error}): "
        f"try {fewer}fewer quantities or heads, or shorter texts"
    )
