"""A join that fails part way (`Continuations.add`, `kv_cache.Group.admit`): the device
runs out of memory prefilling the second of two joining prompts (its group of the
smallest size), or something else raises there. Nothing of the join stays: no row of
the group is left generating for no prompt (before this review the first prompt's row
stayed active, owned by no index, and moved every step until the group fed it past its
cache; the prompts stayed recorded, so the run was never `done`). Out of memory, a
`join_only` add answers None (the caller runs them elsewhere) and the group takes no
more joins; another error passes. XLA's failure is simulated (this CPU does not run
out), as tests/test_generate_out_of_memory.py does. The reference is each prompt
generated alone by the engine (`Engine.generate`)."""

from __future__ import annotations

import dataclasses

import jax
import pytest
from generate_support import MAKERS

import jaxattn
from jaxattn.engine import kv_cache
from jaxattn.engine.generate import Continuations

TEXTS = ["The quick brown fox", "Hello, world.", "a b"]
OOM = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.00GiB."


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    path = MAKERS["gpt2"](tmp_path_factory.mktemp("gpt2"))
    engine = jaxattn.load(path, buckets=(32,), max_batch=4)
    return engine, engine.tokenize(TEXTS)


@pytest.fixture
def failing_prefill(monkeypatch):
    """Arm with `fail["error"]`: the `fail["at"]`-th group of one row started after it
    (a joining prompt's prefill group) raises it as XLA would, once."""
    empty, fail = kv_cache.KVDecoder.empty, {"error": None, "at": 2, "seen": 0}

    def failing(self, shape):
        if fail["error"] is not None and shape.batch == 1:
            fail["seen"] += 1
            if fail["seen"] == fail["at"]:
                raise jax.errors.JaxRuntimeError(fail["error"])
        return empty(self, shape)

    monkeypatch.setattr(kv_cache.KVDecoder, "empty", failing)
    return fail


def _alone(engine, text: str, new: int):
    return engine.generate([text], new, stop_at_eos=False)[0].ids


def _started(engine, prompts, new: int) -> Continuations:
    run = Continuations(engine, prompts[:1], new, stop_at_eos=False)
    run.step()
    run.step()
    assert run._group.shape.batch == 1 and run._group.free == []
    return run


def test_a_join_out_of_memory_part_way_leaves_nothing_and_closes_the_group(gpt2, failing_prefill):
    engine, prompts = gpt2
    run = _started(engine, prompts, 20)
    assert run.joins(prompts[1:3], 6)  # the batch grown for them
    failing_prefill["error"] = OOM  # the second prompt's prefill
    assert run.add(prompts[1:3], 6, stop_at_eos=False, join_only=True) is None
    assert failing_prefill["seen"] == 2
    group = run._group
    assert len(run.prompts) == 1 and list(run._rows.values()) == [0]
    assert group.active.sum() == 1  # the first joiner's row not left generating
    # the device is short of memory for this group: it takes no more joins
    assert not run.joins(prompts[2:3], 2)
    assert run.add(prompts[2:3], 2, stop_at_eos=False, join_only=True) is None
    steps = 2
    while not run.done:
        run.step()
        steps += 1
    assert steps == 20 and run._group is None
    assert list(run.results()[0].ids) == list(_alone(engine, TEXTS[0], 20))


def test_a_join_that_raises_part_way_leaves_nothing_and_the_run_goes_on(gpt2, failing_prefill):
    engine, prompts = gpt2
    run = _started(engine, prompts, 20)
    failing_prefill["error"] = "INTERNAL: something else"
    with pytest.raises(jax.errors.JaxRuntimeError, match="INTERNAL"):
        run.add(prompts[1:3], 6, stop_at_eos=False)
    assert len(run.prompts) == 1 and run._group.active.sum() == 1
    # not a shortage of memory: later prompts still join
    assert run.add(prompts[2:3], 6, stop_at_eos=False, join_only=True) == [1]
    while not run.done:
        run.step()
    got = [list(g.ids) for g in run.results()]
    assert got == [list(_alone(engine, TEXTS[0], 20)), list(_alone(engine, TEXTS[2], 6))]


def test_prompts_that_need_no_row_join_at_once(gpt2):
    # A prompt cut to the model's positions generates nothing (stop "limit"): it joins
    # without a row, whatever the group has room for, and is over at once.
    engine, prompts = gpt2
    run = _started(engine, prompts, 20)
    (full,) = engine.tokenize([" ".join(["word"] * 400)], too_long="truncate")
    assert full.length == engine.config.max_length
    assert run.joins([full], 5)
    assert run.add([full], 5, stop_at_eos=False, join_only=True) == [1]
    assert run.over([1]) and run._group.active.sum() == 1
    assert run.results([1])[0].ids == () and run.results([1])[0].stop == "limit"


def test_a_joined_rows_stops_are_those_it_has_alone(gpt2, monkeypatch):
    # Joined rows end as rows that started the run do, each with its single-call ids:
    # B at an EOS (its row then taken by D), C at the model's positions (a prompt cut
    # near them, truncate), A (started the run) at max_new_tokens.
    engine, _ = gpt2
    words = " ".join(f"w{i}" for i in range(200))
    texts = {"A": "The quick brown fox", "B": "Hello, world.", "C": words, "D": "x"}
    free_b = engine.generate([texts["B"]], 12, stop_at_eos=False)[0].ids
    eos = free_b[-1]  # a token B makes late (the tiny model repeats itself)
    stop_at = free_b.index(eos) + 1
    monkeypatch.setattr(engine, "_eos_ids", (eos,))
    (c,) = engine.tokenize([texts["C"]], too_long="truncate")
    c = dataclasses.replace(c, ids=c.ids[:60], type_ids=c.type_ids[:60], tokens=c.tokens[:60])
    news = {"A": 40, "B": 12, "C": 10, "D": 6}
    (a,) = engine.tokenize([texts["A"]])
    run = Continuations(engine, [a], news["A"], stop_at_eos=False)
    run.step()
    index = {"A": 0}
    (index["B"],) = run.add(engine.tokenize([texts["B"]]), news["B"], join_only=True)
    (index["C"],) = run.add([c], news["C"], stop_at_eos=False, join_only=True)
    rows = dict(run._rows)
    while not run.over([index["B"]]):
        run.step()
    assert run.stops[index["B"]] == "eos" and len(run.grown[index["B"]]) == stop_at
    (index["D"],) = run.add(engine.tokenize([texts["D"]]), news["D"], join_only=True)
    assert {r for r, i in run._rows.items() if i == index["D"]} <= set(rows)  # a row reused
    while not run.done:
        run.step()
    got = {k: run.results([i])[0] for k, i in index.items()}
    assert [got[k].stop for k in "ABC"] == ["max_new_tokens", "eos", "limit"]
    for k in "ABD":
        (alone,) = engine.generate([texts[k]], news[k], stop_at_eos=k != "A")
        assert (got[k].ids, got[k].stop) == (alone.ids, alone.stop), k
    alone_c = Continuations(engine, [c], news["C"], stop_at_eos=False)
    while not alone_c.done:
        alone_c.step()
    (want,) = alone_c.results()
    assert (got["C"].ids, got["C"].stop) == (want.ids, want.stop) and len(want.ids) == 4


def test_prompts_ended_before_their_group_starts_are_not_prefilled(gpt2, monkeypatch):
    # A request that left a merged run before its first step (`end`): the group starts
    # with the other prompts only, not prefilling the gone ones into rows of their own.
    engine, prompts = gpt2
    start, started = kv_cache.KVDecoder.start, []

    def spy(self, group_prompts, *args, **kwargs):
        started.append([p.ids for p in group_prompts])
        return start(self, group_prompts, *args, **kwargs)

    monkeypatch.setattr(kv_cache.KVDecoder, "start", spy)
    run = Continuations(engine, prompts, 4, stop_at_eos=False)
    run.end([0, 2])
    while not run.done:
        run.step()
    assert started == [[prompts[1].ids]]
    assert list(run.results([1])[0].ids) == list(_alone(engine, TEXTS[1], 4))
