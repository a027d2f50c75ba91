"""prefetch: same items in order, errors re-raised in place, closing stops the producer."""

from __future__ import annotations

import threading
import time

import pytest

from service.prefetch import prefetch


def test_items_in_order_and_errors_in_place():
    def gen():
        yield from range(5)
        raise KeyError("late")

    out = []
    with pytest.raises(KeyError, match="late"):
        for x in prefetch(gen(), depth=2):
            out.append(x)
    assert out == [0, 1, 2, 3, 4]


def test_closing_the_consumer_stops_and_closes_the_producer():
    produced, closed = [], threading.Event()

    def gen():
        try:
            for i in range(10_000):
                produced.append(i)
                yield i
        finally:
            closed.set()

    it = prefetch(gen(), depth=2)
    assert next(it) == 0
    it.close()
    assert closed.wait(5)
    assert len(produced) <= 4  # bounded read-ahead: depth + the one in hand + one blocked


def test_the_producer_asleep_on_a_full_queue_is_woken_once_the_consumer_took_it_all(
    monkeypatch,
):
    """A slow consumer (the sends the slower side): the producer fills the queue and
    sleeps; it is woken once the queue is empty, not at each item taken (a wake-up at
    most every `depth` items). The wake-ups counted: releases of the locks made."""
    import types

    from service import prefetch as module

    made: list = []

    class Counted:
        def __init__(self):
            self._lock, self.releases = threading.Lock(), 0
            made.append(self)

        def acquire(self, *args, **kwargs):
            return self._lock.acquire(*args, **kwargs)

        def release(self):
            self.releases += 1
            self._lock.release()

        __enter__ = acquire

        def __exit__(self, *exc):
            self.release()

    monkeypatch.setattr(
        module,
        "threading",
        types.SimpleNamespace(Lock=Counted, Event=threading.Event, Thread=threading.Thread),
    )
    out = []
    for x in prefetch(iter(range(40)), depth=2):
        time.sleep(0.002)  # the send: the producer waits on a full queue meanwhile
        out.append(x)
    assert out == list(range(40))
    _, has_item, has_room = made  # `lock`, then the consumer's and the producer's
    assert 1 <= has_room.releases <= 40 // 2 + 1, has_room.releases
