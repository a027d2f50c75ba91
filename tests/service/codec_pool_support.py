"""The codec pool at rest, and its free slots counted (tests of `jaxattn.wire.codec_pool`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator

from jaxattn.wire import codec_pool


def free_slots_now() -> int:
    """The pool's free slots, counted by taking them all (and giving them back)."""
    slots, taken = codec_pool.pool().slots, 0
    while slots.take():
        taken += 1
    for _ in range(taken):
        slots.give_back()
    return taken


def settle() -> None:
    """Wait until every thread of the pool has finished what it held, the callbacks that
    give slots back included: one job on each thread at once."""
    shared = codec_pool.pool()
    meet = threading.Barrier(shared.threads)
    for job in [shared.executor.submit(meet.wait, 30) for _ in range(shared.threads)]:
        job.result()


def free_slots() -> int:
    """The pool's free slots once it is at rest (`settle`)."""
    settle()
    return free_slots_now()


def ordered(
    work: Callable, items: Iterable, size: Callable[[object], int], ahead: int | None = None
) -> Iterator[tuple]:
    """(item, work(item)) for each of `items`, in order, through a `codec_pool.Stream`
    given them one at a time (as a sender gives the pieces it knows of); closing the
    iterator closes the stream, dropping what was begun ahead."""
    source, end = iter(items), object()
    stream = codec_pool.Stream(
        work, size, ahead, more=lambda: [x] if (x := next(source, end)) is not end else ()
    )
    try:
        while (got := stream.take()) is not None:
            yield got
    finally:
        stream.close()
