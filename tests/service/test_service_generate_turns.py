"""The turns of generating calls (`service.generation_turns.GenerationTurns`), decided
directly (no worker, no timing): a call that waits for a cache slot is not starved by
later calls joining the runs that hold the slots (each join keeps its run, and so the
slot, going: a stream of them would hold the slots for ever)."""

from __future__ import annotations

import collections
from types import SimpleNamespace

from service.generation import GenerationAsk, GenerationRun, SharedGeneration
from service.generation_turns import GenerationTurns


class _Run:
    """A started run holding caches that takes `ask`s whose first prompt is "short"."""

    started = True
    failed = None

    def joins(self, ask):
        return ask.prompts[0] == "short"


def _job(prompt: str, run=None):
    gen = GenerationRun(GenerationAsk((prompt,), 4))
    if run is not None:
        gen.shared = run
    return SimpleNamespace(generation=gen, dead=False)


def test_later_calls_do_not_join_past_an_earlier_call_waiting_for_a_cache_slot():
    turns = GenerationTurns(None, collections.Counter())
    one, two = _Run(), _Run()
    holders = [_job("a", one), _job("b", two)]  # CACHED_GENERATIONS runs hold caches
    waiting = _job("long")  # joins neither: waits for one of them to end
    late = _job("short")  # would join one
    assert not turns.may_start(waiting, [*holders, waiting], join=True)
    assert turns.may_start(late, [*holders, late], join=True)  # none waits before it
    # ... but joining past `waiting` would keep the runs going while it waits
    assert not turns.may_start(late, [*holders, waiting, late], join=True)
    assert turns.may_start(waiting, [*holders, waiting, late], join=True) is False
    # once a slot is free, `waiting` goes (and a call behind it joins as before)
    pending = [holders[0], waiting, late]
    assert turns.may_start(waiting, pending, join=True)
    assert turns.may_start(late, pending, join=True)
    # a call that left waits for nothing; one merged into a run of its own not started
    # waits for a slot too
    waiting.dead = True
    assert turns.may_start(late, [*holders, waiting, late], join=True)
    merged = _job("long", SharedGeneration([GenerationAsk(("long",), 4)]))
    assert not turns.may_start(late, [*holders, merged, late], join=True)
