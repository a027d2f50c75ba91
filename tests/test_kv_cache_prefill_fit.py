"""A group's own prefill fits its prompts, not its cache: it runs at the cache length
holding its longest prompt (`KVDecoder.prefill_length`), that length's chunk, and the
caches are widened to the group's after (`Group.widen`), on Llama (grouped heads, an
untied head). The reference is transformers' greedy ``generate`` of each prompt alone."""

from __future__ import annotations

import pytest
from generate_support import load_pair, torch_generate

from jaxattn.engine import kv_cache
from jaxattn.engine.generate import Continuations

TEXTS = ["Hello, world.", "x", "The quick brown fox jumps"]  # 12, 2 and 22 tokens


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """(engine of at most 4 sequences a group, transformers' eager model, prompts)."""
    engine, torch_model = load_pair("llama", tmp_path_factory.mktemp("llama"), max_batch=4)
    return engine, torch_model, engine.tokenize(TEXTS)


@pytest.fixture
def calls(llama, monkeypatch):
    """Every prefill and step the decoder runs: (kind, ids' shape, cache length)."""
    d, seen = llama[0].kv_decoder, []
    call = d._call

    def spy(program, kind, ids, starts, keys, *rest):
        seen.append((kind, ids.shape, keys.shape[-2]))
        return call(program, kind, ids, starts, keys, *rest)

    monkeypatch.setattr(d, "_call", spy)
    return seen


@pytest.mark.parametrize("new", [4, 40])
def test_a_short_prompt_with_many_new_tokens_prefills_its_own_bucket(llama, calls, new):
    # 12 tokens (11 positions prefilled: bucket 16) continued by 4 (a cache of 16) or by
    # 40 (12 + 39 positions: a cache of 64, whose chunk is 64): both prefill 16
    # positions once, then step in the group's own cache
    engine, torch_model, prompts = llama
    run = Continuations(engine, prompts[:1], new, stop_at_eos=False)
    run.step()
    length = 16 if new == 4 else 64
    assert run._group.shape == kv_cache.Shape(1, length, length)
    assert calls[:2] == [("prefill", (1, 16), 16), ("step", (1, 1), length)]
    while not run.done:
        run.step()
    assert [c[0] for c in calls].count("prefill") == 1
    (g,) = run.results()
    assert list(g.ids) == torch_generate(torch_model, list(g.prompt.ids), new, eos=-1)


def test_a_batch_prefills_at_its_longest_prompts_bucket(llama, calls):
    # three prompts, the longest 22 tokens (21 positions: bucket 32), each continued by
    # 40 (22 + 39 positions: a cache of 64): a batch of 4 prefilled at 32, widened to 64
    engine, torch_model, prompts = llama
    run = Continuations(engine, prompts, 40, stop_at_eos=False)
    run.step()
    assert run._group.shape == kv_cache.Shape(4, 64, 64)
    assert calls[:2] == [("prefill", (4, 32), 32), ("step", (4, 1), 64)]
    assert ("widen", 4, (32, 64)) in engine.kv_decoder._compiled
    while not run.done:
        run.step()
    for g in run.results():
        assert list(g.ids) == torch_generate(torch_model, list(g.prompt.ids), 40, eos=-1)


def test_the_prefill_length_is_one_warmup_compiled(llama):
    # after warmup("largest") a group prefills at a shorter length only where its batch
    # is one that length's prefill was compiled for (the largest or the smallest)
    d = kv_cache.KVDecoder(llama[0])
    assert d.prefill_length(12, 2, 64) == 16  # nothing warmed: every size of the ladder
    d._largest = True  # as warmup("largest") leaves it, without compiling
    assert [d.prefill_length(12, b, 64) for b in (1, 2, 4)] == [16, 64, 16]
    assert d.prefill_length(40, 4, 64) == 64  # 39 positions: the group's own length
