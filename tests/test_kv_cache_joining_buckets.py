"""A prompt joining a running group (`kv_cache.Group.admit`) is prefilled at the cache
length holding its prompt (its own bucket), not in the group's chunks, its caches
widened to the group's (`KVDecoder.widened`), on Llama (grouped heads, an untied head).
The reference is transformers' greedy ``generate`` of each prompt alone."""

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


def test_a_joining_prompt_prefills_at_its_own_bucket_not_the_groups_chunk(llama, monkeypatch):
    # a group of 64 positions (its own prefill at its prompt's bucket, 16:
    # test_kv_cache_prefill_fit); a prompt joining it is prefilled at the cache length
    # holding its prompt (its 1 or 21 positions: 16 and 32), not in the group's chunks
    # of 64, its caches widened to the group's, and continues as transformers' of it alone
    engine, torch_model, prompts = llama
    d = engine.kv_decoder
    calls, call = [], d._call

    def spy(program, kind, ids, starts, keys, *rest):
        calls.append((kind, ids.shape, keys.shape[-2]))
        return call(program, kind, ids, starts, keys, *rest)

    monkeypatch.setattr(d, "_call", spy)
    run = Continuations(engine, prompts[:1], 40, stop_at_eos=False)  # 12 + 39 positions
    run.step()
    assert run._group.shape == kv_cache.Shape(1, 64, 64) and calls[0] == ("prefill", (1, 16), 16)
    calls.clear()
    assert [p.length for p in prompts[1:]] == [2, 22]
    assert run.add(prompts[1:], [8, 4], stop_at_eos=False) == [1, 2]
    assert calls == [("prefill", (1, 16), 16), ("prefill", (1, 32), 32)]
    assert run._group.shape.batch == 4 and ("widen", 1, (16, 32)) in d._compiled
    while not run.done:
        run.step()
    for g, new in zip(run.results(), [40, 8, 4], strict=True):
        assert list(g.ids) == torch_generate(torch_model, list(g.prompt.ids), new, eos=-1)
