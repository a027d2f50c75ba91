"""Greedy generation on the engine (`jaxattn.engine.generate`) against transformers'
``AutoModelForCausalLM.generate(do_sample=False)`` on the tiny random decoders of
`generate_support.MAKERS` (GPT-2, Llama's untied head, Gemma 2's soft-capped logits,
GPT-NeoX); what cannot generate says why."""

from __future__ import annotations

import pytest
from generate_support import MAKERS, PROMPTS, make_llama_checkpoint, pair_cache, torch_generate

import jaxattn
from jaxattn.errors import InputError, UsageError

NEW = 5


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    return pair_cache(tmp_path_factory)


@pytest.fixture(scope="module", params=sorted(MAKERS))
def model(request, pairs):
    return pairs(request.param)


def test_batched_greedy_ids_are_transformers_generate(model):
    name, engine, torch_model = model
    gens = engine.generate(PROMPTS, NEW, stop_at_eos=False)
    assert [g.prompt.text for g in gens] == PROMPTS
    for g in gens:
        # the capture path's tokenisation: Llama's tokenizer prepends BOS, GPT-2's adds none
        assert g.prompt.ids == engine.tokenize([g.prompt.text])[0].ids
        want = torch_generate(torch_model, list(g.prompt.ids), NEW, eos=-1)
        assert list(g.ids) == want, name
        assert len(g.ids) == NEW and g.stop == "max_new_tokens"
        assert g.tokens == tuple(engine.tokenizer.hf.convert_ids_to_tokens(want))
        assert g.text == engine.tokenizer.hf.decode(want, skip_special_tokens=True)
        assert g.generated_start == g.prompt.length
    if name == "llama":
        assert gens[0].prompt.tokens[0] == "<s>"
    # one text alone gives what it gave in the padded batch
    alone = engine.generate([PROMPTS[1]], NEW, stop_at_eos=False)[0]
    assert alone.ids == gens[1].ids


def test_a_continuation_ends_at_the_eos_as_transformers(model, monkeypatch):
    name, engine, torch_model = model
    free = engine.generate(PROMPTS[:1], NEW, stop_at_eos=False)[0]
    eos = free.ids[3]  # the 4th generated token made the EOS (first seen there or before)
    first = free.ids.index(eos)
    monkeypatch.setattr(engine, "_eos_ids", (eos,))  # `Engine.eos_ids`: test_generate_eos
    stopped = engine.generate(PROMPTS[:1], NEW)[0]
    assert stopped.ids == free.ids[: first + 1] and stopped.stop == "eos"
    assert list(stopped.ids) == torch_generate(torch_model, list(free.prompt.ids), NEW, eos)


def test_what_cannot_generate_says_why(pairs, tmp_path, bert_checkpoint):
    name, engine, _ = pairs("llama")
    for bad in (0, -2, 1.5, True):
        with pytest.raises(UsageError, match="max_new_tokens"):
            engine.generate(PROMPTS[:1], bad)
    with pytest.raises(UsageError, match="^generate must be at least 1"):  # the name given
        engine.capture(PROMPTS[:1], generate=0)
    bare = jaxattn.load(make_llama_checkpoint(tmp_path / "bare", lm_head=False))
    with pytest.raises(UsageError, match="has no next-token head.*lm_head.weight"):
        bare.generate(PROMPTS[:1], 2)
    encoder = jaxattn.load(bert_checkpoint)
    with pytest.raises(UsageError, match="is an encoder .*needs a decoder"):
        encoder.capture(["a sentence"], generate=2)


def test_an_ablated_model_generates_as_torch_with_those_heads_zeroed(pairs):
    name, engine, torch_model = pairs("llama")
    from jaxattn.engine.ablation import HeadAblation

    heads = [(0, 1), (1, 0), (1, 3), (2, 2)]
    k = engine.config.head_dim

    def zero(layer):
        def hook(module, args):
            x = args[0].clone()
            for lay, h in heads:
                if lay == layer:
                    x[..., h * k : (h + 1) * k] = 0
            return (x,)

        return hook

    handles = [
        torch_model.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(zero(layer))
        for layer in {lay for lay, _ in heads}
    ]
    try:
        prompt = engine.tokenize(PROMPTS[:1])[0]
        want = torch_generate(torch_model, list(prompt.ids), NEW + 3, eos=-1)
    finally:
        for h in handles:
            h.remove()
    ablation = HeadAblation.of(heads)
    (cap,) = engine.capture(PROMPTS[:1], generate=NEW + 3, stop_at_eos=False, ablation=ablation)
    assert cap.tokens[cap.generated_start :] == tuple(
        engine.tokenizer.hf.convert_ids_to_tokens(want)
    )
    (gen,) = engine.generate(PROMPTS[:1], NEW + 3, stop_at_eos=False, ablation=ablation)
    assert list(gen.ids) == want  # Engine.generate takes the ablation too
    plain = engine.generate(PROMPTS[:1], NEW + 3, stop_at_eos=False)[0]
    assert list(plain.ids) != want  # the heads change what this model writes


def test_an_empty_prompt_without_a_bos_is_refused_naming_the_text(pairs):
    # GPT-2's tokenizer adds no BOS: "" has no token to read the next one at
    _, engine, _ = pairs("gpt2")
    assert engine.tokenize([""])[0].length == 0
    with pytest.raises(InputError, match=r"text 1 is empty: a decoder continues a prompt"):
        engine.generate(["a", ""], 2)
    with pytest.raises(InputError, match=r"text 1 is empty"):
        engine.capture(["a", ""], generate=2)
    with pytest.raises(InputError, match=r"text 2 is empty"):  # by its place in the input
        list(engine.capture_iter(["a", "b", ""], generate=2, window=1))
    # Llama's tokenizer adds a BOS: its empty prompt is one token, continued
    _, llama, _ = pairs("llama")
    (gen,) = llama.generate([""], 2, stop_at_eos=False)
    assert gen.prompt.length == 1 and len(gen.ids) == 2


def test_a_generation_compiles_its_programs_once_not_per_step(pairs):
    from compile_events import GENERATION, backend_compiles

    _, engine, _ = pairs("gpt2")
    (prompt,) = engine.tokenize(["a b c d e f g h i j"])
    new = 40  # 40 steps, from the 32-token bucket into the 64-token one
    assert prompt.length < 32 < prompt.length + new <= engine.config.max_length
    with backend_compiles(GENERATION) as seen:
        (gen,) = engine.generate(["a b c d e f g h i j"], new, stop_at_eos=False)
    assert len(gen.ids) == new
    # one cache length (64 positions): its prefill, step and their writes, each at
    # most once; no step compiles its own
    assert len(seen) <= 4


def test_ablated_and_plain_generations_share_their_programs(pairs):
    # the generation programs always take the ablation's gates (every head kept: ones
    # where none is ablated), so a session mixing ablated and plain generations of the
    # same shapes compiles them once, not once each
    import jax
    from compile_events import GENERATION, backend_compiles

    from jaxattn.engine.ablation import HeadAblation

    _, engine, torch_model = pairs("gpt2")
    texts = ["one two three four", "x"]
    jax.clear_caches()  # JAX's cache holds programs whichever test's engine compiled them
    with backend_compiles(GENERATION) as plain_compiles:
        plain = engine.generate(texts, NEW, stop_at_eos=False)
    assert len(plain_compiles) >= 3  # prefill, step, write
    for mode in ("zero", "uniform"):
        ablation = HeadAblation.of([(0, 1), (2, 0)], mode)
        with backend_compiles(GENERATION) as compiles:
            ablated = engine.generate(texts, NEW, stop_at_eos=False, ablation=ablation)
        assert compiles == [] and [g.ids for g in ablated] != [g.ids for g in plain]
    with backend_compiles(GENERATION) as compiles:
        again = engine.generate(texts, NEW, stop_at_eos=False)
    assert compiles == [] and [g.ids for g in again] == [g.ids for g in plain]
    for g in plain:  # a plain generation, the gates all ones, is transformers' still
        assert list(g.ids) == torch_generate(torch_model, list(g.prompt.ids), NEW, eos=-1)


def test_an_id_past_the_tokenizer_is_named_by_its_number(tmp_path):
    """Pythia's embedding has 50,304 rows for 50,277 tokens: a generation may pick a row
    the tokenizer has no piece for. Its token is "<id N>" (was None: the capture could
    not be saved, and the views and the CLI's token line failed on it)."""
    from gpt2_fixture import make_gpt2_tokenizer  # tests/families: generate_support
    from gpt_neox_fixture import make_gpt_neox_checkpoint
    from safetensors.numpy import load_file, save_file

    path = make_gpt_neox_checkpoint(tmp_path / "m", vocab_size=len(make_gpt2_tokenizer()) + 3)
    weights = load_file(path / "model.safetensors")
    padded = weights["embed_out.weight"].shape[0] - 2  # no token has this id
    # the row that is the final norm's scale, scaled up, wins the first argmax
    weights["embed_out.weight"][padded] = 100 * weights["gpt_neox.final_layer_norm.weight"]
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    engine = jaxattn.load(path, buckets=(16,))
    (g,) = engine.generate(["Hello"], 1, stop_at_eos=False)
    assert g.ids == (padded,) and g.tokens == (f"<id {padded}>",)
    (cap,) = engine.capture(["Hello"], generate=1, what=("attention",))
    assert cap.tokens[-1] == f"<id {padded}>"
    cap.save(tmp_path / "c.npz")
    assert jaxattn.Capture.load(tmp_path / "c.npz").tokens == cap.tokens
