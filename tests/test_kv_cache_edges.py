"""Decoding with a key/value cache at its edges, on GPT-2 (learned absolute positions,
the most position-sensitive of the tiny decoders): prompts at and just below the
model's positions, too_long="truncate" into the limit, prefill chunks cut at every
offset of a prompt, sequences held after their EOS while the others go on, and several
groups under a small budget (one group's caches at a time). The reference is
transformers' greedy ``generate`` of each prompt alone."""

from __future__ import annotations

import weakref

import pytest
from generate_support import MAKERS, torch_generate

import jaxattn
from jaxattn.engine import kv_cache

TEXT = "the cat sat on the mat and then it ran away " * 10


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """(checkpoint path, its engine, transformers' eager model, texts of 1..64 tokens
    by length)."""
    from transformers import AutoModelForCausalLM

    path = MAKERS["gpt2"](tmp_path_factory.mktemp("gpt2"))
    torch_model = AutoModelForCausalLM.from_pretrained(
        str(path), attn_implementation="eager", local_files_only=True
    ).eval()
    engine = jaxattn.load(path, buckets=(32,))
    ids = engine.tokenize([TEXT], too_long="truncate")[0].ids
    texts = {n: engine.tokenizer.decode(list(ids[:n])) for n in range(1, len(ids) + 1)}
    assert all(engine.tokenize([t])[0].length == n for n, t in texts.items())
    return path, engine, torch_model, texts


def _check(engine, torch_model, gens, new, eos=-1):
    limit = engine.config.max_length
    for g in gens:
        room = min(new, limit - g.prompt.length)
        want = torch_generate(torch_model, list(g.prompt.ids), room, eos=eos) if room else []
        assert list(g.ids) == want, (g.prompt.length, g.stop)


def test_prompts_at_and_below_the_positions_and_truncated_into_them(gpt2):
    _, engine, torch_model, texts = gpt2
    limit = engine.config.max_length
    prompts = [texts[limit - 1], texts[limit - 2], texts[40], texts[1], TEXT]
    gens = engine.generate(prompts, 30, stop_at_eos=False, too_long="truncate")
    assert [(g.prompt.length, len(g.ids), g.stop) for g in gens] == [
        (limit - 1, 1, "limit"),
        (limit - 2, 2, "limit"),
        (40, limit - 40, "limit"),  # 24 of its 30: the cache reaches the last position
        (1, 30, "max_new_tokens"),
        (limit, 0, "limit"),  # cut to the positions: no room for a token
    ]
    _check(engine, torch_model, gens, 30)


def test_chunk_boundaries_held_rows_and_several_groups(gpt2, monkeypatch):
    # Chunks of 4: prompts whose prefills (all but their last token) end at, just
    # before and just after a chunk's edge; a budget of two 32-position caches a group
    # (several groups, longest first); an EOS the first prompt writes early while the
    # others in its group go on (held rows) or stop later.
    # Several groups, one after the other, hold one group's caches at a time.
    path, _, torch_model, texts = gpt2
    monkeypatch.setattr(kv_cache, "CHUNK", 4)
    plain = jaxattn.load(path, buckets=(32,))
    prompts = [texts[n] for n in (1, 4, 5, 6, 8, 9, 13)]
    (first,) = plain.generate(prompts[:1], 4, stop_at_eos=False)
    eos = first.ids[2]
    budget = 2 * plain.kv_decoder.cache_bytes(32)
    engine = jaxattn.load(path, buckets=(32,), output_budget=budget)
    monkeypatch.setattr(engine, "_eos_ids", (eos,))  # `Engine.eos_ids`: test_generate_eos
    decoder = engine.kv_decoder
    needs = {i: decoder.need(engine.tokenize([t])[0].length, 12) for i, t in enumerate(prompts)}
    groups = decoder.groups(needs)
    assert len(groups) > 1 and decoder.chunk(decoder.cache_length(max(needs.values()))) == 4
    made, peak = [], []  # each group's, and how many were alive as each one started
    init = kv_cache.Group.__init__

    def counted(group, *args):
        peak.append(sum(r() is not None for r in made))
        made.append(weakref.ref(group))
        init(group, *args)

    monkeypatch.setattr(kv_cache.Group, "__init__", counted)
    gens = engine.generate(prompts, 12)
    # one group's caches at a time: the next ones are made once the last's are let go
    assert len(made) == len(groups) and peak == [0] * len(groups)
    assert gens[0].stop == "eos" and len(gens[0].ids) == first.ids.index(eos) + 1
    assert any(g.stop == "max_new_tokens" for g in gens)
    _check(engine, torch_model, gens, 12, eos=eos)
