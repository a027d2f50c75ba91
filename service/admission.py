"""Admission: what a request reserves, and when the server says no (RESOURCE_EXHAUSTED).

A job reserves its worst case at admission: its unsent-results bound (the
per-call buffer, or its largest example if larger, never more than all its
results) plus the chunks its stream may hold. The batcher admits it only while
fewer than `queue_size` jobs hold a slot and the reservations fit `total_bytes`.
"""

from __future__ import annotations

from collections.abc import Sequence

from service.limits import human_bytes

# Chunks one stream may hold besides its buffered examples: two prefetched,
# one being built, one inside gRPC (see service/servicer.py).
STREAM_CHUNKS = 4


class QueueFull(Exception):
    """The server is at its admitted-request or buffered-bytes limit.

    Attributes:
      limit: which one, as the `jaxattn-limit` trailer names it (attention.proto):
        "queue_size", "max_buffered_bytes" (this request alone is too big) or
        "buffers_full" (the others' reservations leave no room now).
    """

    def __init__(self, message: str, limit: str):
        super().__init__(message)
        self.limit = limit


def example_sizes(engine, spec, tokenized: Sequence) -> list[int]:
    """Each example's output bytes by `engine.output_bytes`; 0 where the engine has no
    sizer (a test double)."""
    sizer = getattr(engine, "output_bytes", None)
    return [int(sizer(spec, e.length)) if sizer else 0 for e in tokenized]


def reservation(
    engine,
    spec,
    tokenized: Sequence,
    *,
    buffer_bytes: int,
    chunk_bytes: int,
    coalesce=False,
    group_bytes: int | None = None,
) -> tuple[list[int], int]:
    """(output bytes of each example, bytes the job reserves).

    `engine.output_bytes`, when the engine has it, sizes the examples; an
    engine without it (a test double) reserves nothing. A stream message holds
    at most `chunk_bytes` of one example, or, coalesced (`coalesce`), of several:
    up to `chunk_bytes` of all of them, however small each is. With `group_bytes`
    an example run in layer groups is held a group at a time (`Engine.part_bytes`):
    its group, not its whole output, is what may exceed the buffer.
    """
    sizes = example_sizes(engine, spec, tokenized)
    held = sizes
    part_sizer = getattr(engine, "part_bytes", None)
    if group_bytes and part_sizer is not None:
        held = [int(part_sizer(spec, e.length, group_bytes)) for e in tokenized]
    largest = max(held, default=0)
    reserve = min(sum(sizes), max(buffer_bytes, largest))
    per_message = sum(sizes) if coalesce else largest
    return sizes, reserve + STREAM_CHUNKS * min(chunk_bytes, per_message)


def refusal(
    *, admitted: int, queue_size: int, reserve: int, reserved: int, total_bytes: int
) -> QueueFull | None:
    """Why a job cannot be admitted now (the QueueFull to raise), or None if it can."""
    if admitted >= queue_size:
        return QueueFull(
            f"the server's queue is full ({queue_size} requests in progress); retry later",
            "queue_size",
        )
    if reserve > total_bytes:
        return QueueFull(
            f"this request needs {human_bytes(reserve)} of result buffer; this server "
            f"allows {human_bytes(total_bytes)} (max_buffered_bytes): send fewer or shorter "
            "texts, or fewer quantities",
            "max_buffered_bytes",
        )
    if reserved + reserve > total_bytes:
        return QueueFull(
            f"the server's result buffers are full ({human_bytes(reserved)} of "
            f"{human_bytes(total_bytes)} reserved); retry later",
            "buffers_full",
        )
    return None
