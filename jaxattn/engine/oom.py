"""Batches that run out of device memory: run again in halves, never a crash.

A device's free memory is estimated when batches are sized
(`batching.Budgets.for_devices`), but activations, fragmentation and other
programs can still make XLA fail with RESOURCE_EXHAUSTED, and so can XLA's pool
of pinned host memory (64 GB by default on GPUs) when pinned outputs are kept. The engine then runs
that batch as batches of at most half its size, recursively. An example that
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
from jaxattn.errors import DeviceMemoryError

log = logging.getLogger("jaxattn.engine")


def out_of_memory(error: BaseException) -> bool:
    """Whether XLA failed for want of device memory (a batch too large), not a bug."""
    text = str(error)
    return isinstance(error, jax.errors.JaxRuntimeError) and (
        "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()
    )


def in_halves(pipeline, batch, tokenized, spec, gates, error) -> Iterator[tuple[int, Capture]]:
    """Run a batch that ran out of device memory as batches of at most half its size,
    through `pipeline` (a `jaxattn.engine.pipeline.BatchPipeline`)."""
    per_device = batch.size // len(pipeline.devices)
    if per_device <= 1:
        yield from in_groups(pipeline, batch, tokenized, spec, gates, error)
        return
    log.warning(  # XLA's words say which memory: the device's, or the pinned host pool
        "a batch of %d x %d tokens ran out of memory (%s); running it in halves",
        batch.size,
        batch.length,
        _first_line(error),
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
            yield from (
                (batch.rows[p], cap) for p, cap in in_halves(pipeline, sub, rows, spec, gates, e)
            )
            continue
        done = host.unpack(sub, blocks, rows, spec, pipeline.provenance)
        yield from ((batch.rows[p], cap) for p, cap in done)


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
    log.warning(  # XLA's words say which memory: the device's, or the pinned host pool
        "an example of %d tokens ran out of memory as one program (%s); running it in "
        "layer groups of %d captured layers",
        batch.length,
        _first_line(error),
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


def _first_line(error: BaseException) -> str:
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
