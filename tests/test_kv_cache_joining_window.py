"""Prompts joining a running group (`Continuations.add`) on Mistral (a sliding window of
7 in every layer, grouped heads; continuations past the window): a group of one grown to
the smallest batch of its ladder holding two joining prompts, and a prompt whose need is past
the group's cache, which cannot join and generates in a later group. The reference is
each prompt generated alone by the engine (`Engine.generate`)."""

from __future__ import annotations

import generate_support  # noqa: F401  (puts tests/families on the path)
import pytest
from llama_variants_fixture import make_variant_checkpoint

import jaxattn
from jaxattn.engine import kv_cache
from jaxattn.engine.generate import Continuations

TEXTS = ["The quick brown fox jumps", "x", "a b c", "z y"]  # 22, 2, 5 and 4 tokens
NEW = 9


@pytest.fixture(scope="module")
def mistral(tmp_path_factory):
    path = make_variant_checkpoint("mistral", tmp_path_factory.mktemp("mistral"))
    engine = jaxattn.load(path, buckets=(32,), max_batch=4)
    return engine, engine.tokenize(TEXTS)


def test_the_batch_grows_for_joining_prompts_and_a_longer_need_waits(mistral):
    engine, prompts = mistral
    run = Continuations(engine, prompts[3:], NEW, stop_at_eos=False)
    run.step()
    assert run._group.shape == kv_cache.Shape(1, 16, 16)  # a group of one, 12 positions
    # two join: the batch grows a size of its ladder at a time (1, 2, 4) to the
    # smallest holding three, its row kept
    assert run.add(prompts[1:3], 5, stop_at_eos=False) == [1, 2]
    group = run._group
    assert group.shape.batch == 4 and sorted(run._rows) == [0, 1, 2] and group.free == [3]
    # all or nothing: two do not fit the one free row of the largest batch
    assert not run.joins(prompts[1:3], 2) and run.joins(prompts[1:2], 2)
    # a continuation that needs more than the cache's 16 positions cannot join: it
    # generates in a group of its own after this one
    assert engine.kv_decoder.need(prompts[0].length, NEW) > 16
    assert run.add(prompts[:1], NEW, stop_at_eos=False, join_only=True) is None
    assert len(run.prompts) == 3  # nothing added
    assert run.add(prompts[:1], NEW, stop_at_eos=False) == [3]
    assert run._group is group and 3 not in run._rows.values()
    run.step()
    # with a prompt of the run waiting for a later group, none joins (it would wait)
    assert not run.joins(prompts[1:2], 2)
    while not run.done:
        run.step()
    got = [list(g.ids) for g in run.results()]
    alone = [list(engine.generate([t], NEW, stop_at_eos=False)[0].ids) for t in TEXTS]
    assert got == [alone[3], alone[1][:5], alone[2][:5], alone[0]]
    assert [g.prompt.ids for g in run.results([2, 1])] == [prompts[2].ids, prompts[1].ids]
