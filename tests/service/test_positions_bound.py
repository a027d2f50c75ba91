"""A selection of positions is bounded before it is listed: `range(10**9)` is counted,
an endless generator read one past the bound, by the client (before any call) and by
the engine alike. The bound is the model's longest input where it is known, else
`jaxattn.selection.MAX_POSITIONS`; the server's own check takes the same bound.

Before, the client listed `query_positions=range(10**9)` (its memory filled) and read
`itertools.count()` for ever; the engine did the same with the generator.
"""

from __future__ import annotations

import itertools
import tracemalloc

import pytest
from service_support import TEXTS, WHAT

from jaxattn.client import AttentionClient
from jaxattn.errors import UsageError
from jaxattn.selection import MAX_POSITIONS, position_limit, positions_of

FIELDS = ("query_positions", "key_positions")


def refused(call, field: str, value, trace: bool = True) -> tuple[str, int | None]:
    """(the UsageError's message, the peak bytes traced while refusing: None untraced)."""
    if trace:
        tracemalloc.start()
    try:
        with pytest.raises(UsageError) as info:
            call(**{field: value})
        return str(info.value), tracemalloc.get_traced_memory()[1] if trace else None
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("field", FIELDS)
def test_a_client_that_knows_no_model_bounds_positions_by_max_positions(address, field):
    with AttentionClient(address, timeout=30, retries=0) as client:
        capture = lambda **kw: client.capture(TEXTS[:1], what=WHAT, **kw)  # noqa: E731
        message, peak = refused(capture, field, range(10**9))
        assert message == (
            f"{field} names 1000000000 positions, more than a request may name (1048576, "
            "jaxattn.selection.MAX_POSITIONS: each names a token of every text)"
        )
        assert peak < 1 << 20  # counted, not listed (it was 10**9 ints)
        endless = itertools.count()  # untraced: tracing 2**20 ints takes seconds
        message, _ = refused(capture, field, endless, trace=False)
        assert message.startswith(f"{field} names at least 1048577 positions, more than a")
        assert next(endless) == MAX_POSITIONS + 1  # read one past the bound, no further


@pytest.mark.parametrize("field", FIELDS)
def test_a_client_that_knows_the_model_bounds_positions_by_its_longest_input(address, field):
    with AttentionClient(address, timeout=30, retries=0) as client:
        longest = client.model_info().max_positions
        capture = lambda **kw: client.capture(TEXTS[:1], what=WHAT, **kw)  # noqa: E731
        words = f"more than the model's longest input ({longest} tokens)"
        assert refused(capture, field, range(10**9))[0] == (
            f"{field} names 1000000000 positions, {words}"
        )
        endless = itertools.count()
        message, peak = refused(capture, field, endless)
        assert message == f"{field} names at least {longest + 1} positions, {words}"
        assert next(endless) == longest + 1 and peak < 1 << 20
        # capture_iter too, before any text is read
        stream = lambda **kw: client.capture_iter(iter(TEXTS), what=WHAT, **kw)  # noqa: E731
        assert refused(stream, field, itertools.count())[0].endswith(words)


@pytest.mark.parametrize("field", FIELDS)
def test_the_engine_bounds_positions_by_its_longest_input(svc_engine, field):
    longest = svc_engine.config.max_length
    words = f"more than the model's longest input ({longest} tokens)"
    for call in (svc_engine.capture, svc_engine.capture_iter):
        capture = lambda call=call, **kw: call(TEXTS[:1], what=WHAT, **kw)  # noqa: E731
        endless = itertools.count()
        message, peak = refused(capture, field, endless)
        assert message == f"{field} names at least {longest + 1} positions, {words}"
        assert next(endless) == longest + 1 and peak < 1 << 20
        assert refused(capture, field, range(10**9))[0].endswith(words)


def test_a_generator_of_positions_serves_every_window(svc_engine, client):
    """Read once, not per window: the second window found the generator spent."""
    want = [c.query_positions for c in svc_engine.capture(TEXTS, what=WHAT, query_positions=[0])]
    for source in (svc_engine, client):
        stream = source.capture_iter(TEXTS, what=WHAT, window=1, query_positions=iter([0]))
        assert [c.query_positions for c in stream] == want


def test_one_bound_for_every_model_length():
    """The model's length up to MAX_POSITIONS; MAX_POSITIONS beyond it or without one."""
    assert position_limit(512)[0] == 512
    assert position_limit(MAX_POSITIONS)[0] == MAX_POSITIONS
    assert position_limit(MAX_POSITIONS * 4)[0] == MAX_POSITIONS
    assert position_limit(None)[0] == MAX_POSITIONS
    with pytest.raises(UsageError, match="more than a request may name"):
        positions_of(range(MAX_POSITIONS + 1), "query_positions", MAX_POSITIONS * 4)
    assert len(positions_of(range(MAX_POSITIONS), "query_positions", None)) == MAX_POSITIONS


@pytest.mark.parametrize("field", ("layers", "heads"))
def test_a_generator_of_layers_or_heads_is_read_to_its_first_index_out_of_range(
    client, svc_engine, field
):
    """The client listed a generator of layers/heads before anything else:
    `layers=itertools.count()` never ended. Now a generator is resolved against the
    model's count (one GetModelInfo call), read no further than its first bad index."""
    count = getattr(svc_engine.info, field)
    read = []

    def endless():  # stops the test, not the machine, where it is read too far
        for i in itertools.count():
            assert i < 1000, f"{field} read past {i}"
            read.append(i)
            yield i

    with pytest.raises(UsageError, match=f"out of range: valid {field} are 0..{count - 1}"):
        client.capture(TEXTS[:1], what=WHAT, **{field: endless()})
    assert read[-1] == count  # read up to `count`, the first out of range
    got = client.capture(TEXTS[:1], what=WHAT, **{field: (i for i in (-1, 0))})
    want = svc_engine.capture(TEXTS[:1], what=WHAT, **{field: [0, count - 1]})
    assert getattr(got[0], field) == getattr(want[0], field) == (0, count - 1)
