"""prefetch: same items in order, errors re-raised in place, closing stops the producer."""

from __future__ import annotations

import threading

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
