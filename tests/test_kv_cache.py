"""Decoding with a key/value cache (`jaxattn.engine.kv_cache`) on the decoders whose
attention differs most: Mistral (a sliding window in every layer), Qwen3 (per-head q/k
norms, head_dim given, sliding and full layers) and Gemma 3 (local and global layers with
their own RoPE bases, linear scaling, (1+w) norms, query_pre_attn_scalar) and GPT-NeoX
(partial rotary of an odd number of dims, a parallel residual).

Two independent references: transformers' greedy ``generate`` (its own cached decoding)
for the tokens, and the capture program's keys and values of prompt + continuation (the
whole-sequence forward, exact against transformers' eager model in the family tests) for
the cache itself, position by position. Texts run past every sliding window.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from generate_support import torch_generate
from llama_variants_fixture import make_variant_checkpoint

import jaxattn
from jaxattn.engine import kv_cache
from jaxattn.engine.tokenize import TokenizedText

PROMPTS = ["The quick brown fox jumps over", "Hello,", "a b c d e f g h i j k l"]
NEW = 9  # every prompt + continuation runs past the windows (5-9 keys)


def _make(name: str, path):
    if name == "gpt_neox":
        from gpt_neox_fixture import make_gpt_neox_checkpoint

        return make_gpt_neox_checkpoint(path)
    if name == "gemma3":
        from gemma_fixture import make_gemma_checkpoint

        return make_gemma_checkpoint("gemma3", path)
    return make_variant_checkpoint(name, path)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """name -> (name, checkpoint path, transformers' eager model), each made once."""
    from transformers import AutoModelForCausalLM

    made = {}

    def get(name: str):
        if name not in made:
            path = _make(name, tmp_path_factory.mktemp(name))
            torch_model = AutoModelForCausalLM.from_pretrained(
                str(path), attn_implementation="eager", local_files_only=True
            ).eval()
            made[name] = (name, path, torch_model)
        return made[name]

    return get


@pytest.fixture(scope="module", params=["mistral", "qwen3", "gemma3", "gpt_neox"])
def model(request, models):
    return models(request.param)


def _cache_of(engine, prompts: list[TokenizedText], new: int):
    """(each prompt's continuation, the group's keys and values [B, L, H_kv, S, K] after
    it) from one group run by hand as `Continuations` runs it, no stop but the count."""
    d = engine.kv_decoder
    group = d.start(prompts, max(d.need(p.length, new) for p in prompts))
    grown = [[] for _ in prompts]
    for step in range(new):
        held = [] if step < new - 1 else range(len(prompts))
        picked = group.step(held)
        for row, g in enumerate(grown):
            g.append(int(picked[row]))
    return grown, np.asarray(group.keys), np.asarray(group.values)


def test_cached_greedy_tokens_are_transformers_generate(model):
    name, path, torch_model = model
    engine = jaxattn.load(path, buckets=(16,))
    gens = engine.generate(PROMPTS, NEW, stop_at_eos=False)
    for g in gens:
        want = torch_generate(torch_model, list(g.prompt.ids), NEW, eos=-1)
        assert list(g.ids) == want, (name, g.prompt.text)
        assert g.stop == "max_new_tokens"


def test_the_cache_holds_the_capture_programs_keys_and_values(model):
    # Every position the steps fed (the prompt through the prefill, then each generated
    # token but the last) holds the keys and values the whole-sequence capture computes
    # for prompt + continuation: RoPE at each step's own position, the q/k norms, every
    # layer; in a padded group of three prompts of different lengths.
    _check_cache(*model[1:2], "unrolled")


def test_a_scanned_cache_holds_them_too(models):
    # Scanned layers (Gemma 3's local and global layers as data in one scan body; the
    # other families' scans are the same code without the kind).
    _check_cache(models("gemma3")[1], "scan")


def _check_cache(path, layer_loop: str) -> None:
    engine = jaxattn.load(path, buckets=(16,), layer_loop=layer_loop)
    prompts = engine.tokenize(PROMPTS)
    grown, keys, values = _cache_of(engine, prompts, NEW)
    seqs = [p.text for p in prompts]
    for row, (p, g) in enumerate(zip(prompts, grown, strict=True)):
        ids = p.ids + tuple(g)
        fed = len(ids) - 1  # the last generated token never went through the model
        seq = dataclasses.replace(p, ids=ids, type_ids=(0,) * len(ids), tokens=("",) * len(ids))
        spec = engine.make_spec(("keys", "values"))
        ((_, cap),) = list(engine.run([seq], spec))
        np.testing.assert_allclose(keys[row, :, :, :fed], cap.keys[:, :, :fed], atol=2e-5)
        np.testing.assert_allclose(values[row, :, :, :fed], cap.values[:, :, :fed], atol=2e-5)
    assert seqs == PROMPTS


def test_a_long_prompt_is_prefilled_in_chunks_and_groups_follow_the_budget(models, monkeypatch):
    # Chunks of 8 positions (the longer prompts are two), and one sequence a group
    # (max_batch; the output budget's share: test_cache_lengths_chunks_and_batch_sizes):
    # three groups, longest prompt first, the same tokens.
    _, path, torch_model = models("qwen3")
    monkeypatch.setattr(kv_cache, "CHUNK", 8)
    engine = jaxattn.load(path, buckets=(16,))
    prompts = engine.tokenize(PROMPTS)
    lengths = [p.length for p in prompts]
    assert sorted(lengths)[1] > 9  # two prompts' prefills (all but their last token) are 2 chunks
    small = jaxattn.load(path, buckets=(16,), max_batch=1)
    decoder = small.kv_decoder
    calls = []
    monkeypatch.setattr(
        decoder, "_call", lambda *a, _call=decoder._call: calls.append(a[1]) or _call(*a)
    )
    groups = decoder.groups({i: decoder.need(p.length, NEW) for i, p in enumerate(prompts)})
    assert groups == [[i] for i in np.argsort([-n for n in lengths], kind="stable")]
    assert decoder.chunk(decoder.cache_length(decoder.need(max(lengths), NEW))) == 8
    gens = small.generate(PROMPTS, NEW, stop_at_eos=False)
    for g in gens:
        assert list(g.ids) == torch_generate(torch_model, list(g.prompt.ids), NEW, eos=-1)
    chunks = sum(-(-(n - 1) // 8) for n in lengths)
    assert calls.count("prefill") == chunks and calls.count("step") == 3 * NEW


def _shape_rules(budgets, max_length: int, **dims):
    """A KVDecoder of a stand-in engine: only what its shape rules read (`budgets`, the
    config's sizes, one device)."""

    class Engine:
        config = type("C", (), dict(dims, max_length=max_length))()
        devices = (None,)

    Engine.budgets = budgets
    d = object.__new__(kv_cache.KVDecoder)
    d._engine, d.config, d.devices = lambda: Engine, Engine.config, Engine.devices
    d._largest = False
    return d


def test_cache_lengths_chunks_and_batch_sizes(monkeypatch):
    budgets = jaxattn.engine.batching.Budgets(output_bytes=1 << 20, max_batch=64)
    d = _shape_rules(budgets, 3000, num_layers=2, kv_heads=2, head_dim=4, num_heads=4)
    # the last generated token is never fed: 5 + 4 - 1 = 8 positions, in the shortest (16)
    assert d.need(5, 4) == 8 and d.need(2999, 500) == 3000  # never past the positions
    assert d.cache_length(8) == 16 and d.cache_length(17) == 32 and d.cache_length(32) == 32
    assert d.cache_length(609) == 1024 and d.chunk(1024) == 512  # whole chunks
    assert d.cache_length(3000) == 4096  # the power of two over the need
    # the longest first; a 4,096-position cache is 512 KiB, and a prefill chunk's own
    # keys and values 64 KiB more: one a group in 1 MiB, then the two short ones
    assert d.groups({0: 8, 1: 3000, 2: 20}) == [[1], [2, 0]]
    assert d.lengths() == [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    assert d.chunk(256) == 256 and d.chunk(4096) == 512
    # 2 layers * 2 heads * 4 dims * 2 (k, v) * 4 bytes = 128 bytes a position
    assert d.cache_bytes(16) == 16 * 128
    assert d.largest_batch(16) == 64  # max_batch
    assert d.largest_batch(1024) == 4  # 1 MiB / (128 KiB + a 512-position chunk's 64 KiB)
    assert d.shape(3, 1024).batch == 4 and d.shape(1, 1024).batch == 1


def test_an_engine_that_generated_is_freed_when_its_last_user_lets_go(models):
    # The engine holds its decoder (`Engine.kv_decoder`) and the decoder its programs:
    # neither may hold the other back (a reference cycle keeps the weights and the
    # unembedding on the devices until a garbage collection), as the capture's parts.
    import gc
    import weakref

    _, path, _ = models("qwen3")
    engine = jaxattn.load(path, buckets=(16,))
    engine.generate(PROMPTS[:1], 2)
    refs = [weakref.ref(engine), weakref.ref(engine.kv_decoder)]
    gc.disable()
    try:
        del engine
        assert [r() for r in refs] == [None, None]
    finally:
        gc.enable()


def test_a_step_past_the_groups_cache_is_refused_not_clamped(models):
    # A group started for `need` positions has a cache of at least them (here exactly:
    # a power of two). One step more would write its keys past the cache's end, which
    # dynamic_update_slice clamps (silently overwriting the last position, the RoPE
    # table read clamped too): refused, naming the numbers. A held row at the end may
    # stay there (its result is ignored).
    from jaxattn.errors import UsageError

    _, path, _ = models("qwen3")
    engine = jaxattn.load(path, buckets=(16,))
    (prompt,) = engine.tokenize(PROMPTS[:1])
    size = engine.kv_decoder.cache_length(prompt.length)  # 32 for its 25 tokens
    group = engine.kv_decoder.start([prompt], size)
    assert group.shape.length == size > prompt.length
    for _ in range(size - prompt.length + 1):  # positions n - 1 .. size - 1
        group.step()
    with pytest.raises(UsageError, match=rf"position {size}, past its cache of {size} positions"):
        group.step()
    group.step(held=[0])  # its result ignored, its position unmoved
    assert group.positions[0] == size


def test_a_prefill_chunks_scores_count_the_cache_and_the_chunks_own_keys():
    # A chunk of C queries scores the cache's S keys and its own C (`SelfAttention.
    # _cached`: [H, C, S + C] scores, softmaxed together): 16 bytes a score
    # (kv_cache._SCORE_BYTES) of 4 heads, C = S = 16: 4 * 16 * 32 * 16 = 32 KiB a
    # sequence; an attention budget of 128 KiB holds 4 sequences, not 8.
    budgets = jaxattn.engine.batching.Budgets(attention_bytes=128 << 10, max_batch=64)
    d = _shape_rules(budgets, 16, num_layers=1, kv_heads=1, head_dim=4, num_heads=4)
    assert d.chunk(16) == 16 and d.largest_batch(16) == 4
