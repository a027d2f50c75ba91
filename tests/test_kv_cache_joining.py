"""Prompts joining a running group between its steps (`Continuations.add`,
`kv_cache.Group.admit`) on Llama (grouped heads, H/H_kv = 2, an untied head): into a
padding row, into the row of a sequence that ended, into a batch grown to the next size
of its ladder; a joined prompt ended leaves the others. The reference is
transformers' greedy ``generate`` of each prompt alone (its own cached decoding),
independent of the join (test_kv_cache_joining_window: a sliding window, against each
prompt generated alone by the engine)."""

from __future__ import annotations

import jax
import pytest
from compile_events import GENERATION, backend_compiles
from generate_support import load_pair, torch_generate

from jaxattn.engine import kv_cache
from jaxattn.engine.generate import Continuations

TEXTS = ["The quick brown fox jumps", "Hello, world.", "a b c", "once upon a time", "x"]
NEW = 9


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """(engine of at most 4 sequences a group, transformers' eager model, prompts)."""
    engine, torch_model = load_pair("llama", tmp_path_factory.mktemp("llama"), max_batch=4)
    return engine, torch_model, engine.tokenize(TEXTS)


def _check(torch_model, run: Continuations, news) -> None:
    """Run to the end: each prompt's tokens are transformers' of it alone."""
    while not run.done:
        run.step()
    for g, new in zip(run.results(), news, strict=True):
        assert list(g.ids) == torch_generate(torch_model, list(g.prompt.ids), new, eos=-1)


def test_prompts_join_padding_rows_and_ended_rows(llama):
    engine, torch_model, prompts = llama
    # three prompts in a batch of 4 (one padding row); the first ends after 3 tokens
    run = Continuations(engine, prompts[:3], [3, NEW, NEW], stop_at_eos=False)
    run.step()
    run.step()
    group = run._group
    assert group.shape == kv_cache.Shape(4, 32, 32) and group.free == [3]
    assert run.add(prompts[3:4], NEW, stop_at_eos=False) == [3]  # into the padding row
    assert run._group is group and run._rows[3] == 3
    run.step()  # the first prompt's third token: its row is free for the next join
    assert run.over([0]) and not run.over([3])
    assert run.add(prompts[4:5], 4, stop_at_eos=False) == [4]
    assert run._group is group and run._rows[0] == 4 and group.shape.batch == 4
    _check(torch_model, run, [3, NEW, NEW, NEW, 4])


def test_a_grown_batch_and_a_joined_prompt_that_leaves(llama):
    engine, torch_model, prompts = llama
    run = Continuations(engine, prompts[:2], NEW, stop_at_eos=False)
    run.step()
    assert run._group.shape.batch == 2  # no free row: the next two grow it to 4
    assert run.add(prompts[2:4], NEW, stop_at_eos=False) == [2, 3]
    assert run._group.shape.batch == 4 and sorted(run._rows) == [0, 1, 2, 3]
    run.step()
    run.end([3])
    assert run.over([3]) and not run.done
    while not run.done:
        run.step()
    assert run.results([3]) == [None]
    for g in run.results([0, 1, 2]):
        assert list(g.ids) == torch_generate(torch_model, list(g.prompt.ids), NEW, eos=-1)


def test_warmup_compiles_what_a_join_runs(llama):
    # `KVDecoder.warmup` compiles with each shape what a prompt joining it runs: the
    # batch's growth to the next size of its length's ladder, the smallest size's
    # prefill and write, the widening of a shorter prompt's caches from the length
    # below and the insertion of its rows (a decoder that ran nothing)
    engine, _, _ = llama
    d = kv_cache.KVDecoder(engine)
    # JAX's own cache holds a program by its function and shapes, whichever decoder
    # ran it: the weightless ones (write, grow, insert) another test's model of the
    # same dimensions compiled would not compile here again
    jax.clear_caches()
    with backend_compiles(GENERATION) as compiles:
        assert d._compile(kv_cache.Shape(2, 16, 16)) == 8  # the shortest: no widening
    names = [str(n) for n in compiles]
    assert len(names) == 8 and [sum(p in n for n in names) for p in ("_grow", "_insert")] == [1, 1]
    assert {("grow", (2, 4), 16), ("insert", (2, 1), 16)} <= d._compiled
    assert ("prefill", (1, 16), 16) in d._compiled
    with backend_compiles(("_grow",)) as compiles:
        d._compile(kv_cache.Shape(4, 32, 32))  # the largest batch grows not
    # two widenings from 16: a joining prompt's (1 row) and the group's own (4 rows,
    # prefilled at its prompts' length: test_kv_cache_prefill_fit)
    assert len(compiles) == 2 and {("widen", b, (16, 32)) for b in (1, 4)} <= d._compiled
    assert not any(key[0] == "grow" and key[1][0] == 4 for key in d._compiled)
