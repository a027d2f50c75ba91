"""The codec pool at rest, and its free slots counted (tests of `jaxattn.wire.codec_pool`)."""

from __future__ import annotations

import threading

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
