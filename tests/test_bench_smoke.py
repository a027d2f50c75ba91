"""The capture benchmark runs end to end (no timing asserted: figures go to BENCHMARKS.md)."""

from __future__ import annotations

import pytest

from jaxattn.bench import capture as bench

CONLLU = "".join(
    f"# text = {t}\n1\t{t.split()[0]}\t_\t_\t_\t_\t0\troot\t_\t_\n\n"
    for t in ("i went to the store .", "the store", "at")
)


def test_bench_runs_every_case_on_a_tiny_model(bert_checkpoint, tmp_path):
    path = tmp_path / "tiny.conllu"
    path.write_text(CONLLU)
    lines = []
    res = bench.run(path, n=2, repeats=1, model=str(bert_checkpoint), progress=lines.append)
    assert res["n"] == 2
    cases = (
        "a_transformers",
        "b_forward",
        "c_attention",
        "d_full",
        "e_attention_uint8",
        "f_transformers_forward",
    )
    for case in cases:
        assert res[case] > 0 and len(res[f"{case}_rounds_s"]) == 1
    # The bytes the copy moved: padded blocks, uint8 a quarter of float32.
    assert res["e_attention_uint8_bytes"] * 4 == res["c_attention_bytes"] > 0
    assert res["d_full_bytes"] > res["c_attention_bytes"] and res["copy_gb_s"] > 0
    text = bench.format_result(res)
    assert "(c) speed-up over (a)" in text and "GB/s to the host" in text
    assert res["b_over_f"] > 0 and "against transformers' plain forward (f)" in text
    assert "copy of the same bytes as (d)" in text
    # each step said as it ended: a run stopped at a time limit shows how far it came
    assert lines[0].startswith("loaded ") and "transformers' reference loaded" in lines[1]
    firsts = [line.split(":")[0] for line in lines if "first pass" in line]
    assert firsts == list(cases)
    assert lines[-1].startswith("round 1 of 1: a_transformers ")


def test_bench_times_a_decoder_whose_tokenizer_has_no_padding_token(tmp_path):
    """GPT-2's and Llama's tokenizers have no pad token: transformers' padded batches of
    (a) and (f) failed with its 'Asking to pad but the tokenizer does not have a padding
    token' (jaxattn bench --model gpt2)."""

    from llama_fixture import make_llama_checkpoint

    model = make_llama_checkpoint(tmp_path / "llama")
    texts = ["the cat sat on the mat", "a dog"]  # two lengths: the batch pads
    res = bench.run(None, n=2, repeats=1, model=str(model), texts=texts)
    assert res["n"] == 2 and res["a_transformers"] > 0 and res["f_transformers_forward"] > 0


def test_a_synthetic_checkpoint_takes_its_tokenizer_from_the_named_directory(tmp_path, monkeypatch):
    """On a GPU machine without the embedded model, JAXATTN_BENCH_TOKENIZER names a copy
    of its tokenizer files (the benchmark's model shape shrunk: the path is what is tested)."""
    import shutil

    import jaxattn
    from jaxattn.bench import synthetic
    from jaxattn.checkpoints.loading import default_model_dir

    tok = tmp_path / "tok"
    tok.mkdir()
    shutil.copy(default_model_dir() / "tokenizer.json", tok)
    tiny = dict(hidden_size=12, num_hidden_layers=1, num_attention_heads=3, intermediate_size=20)
    monkeypatch.setattr(synthetic, "BASE", {**synthetic.BASE, **tiny})
    from jaxattn.checkpoints import loading

    def not_installed():
        raise ImportError("the embedded model is not installed here")

    monkeypatch.setattr(loading, "default_model_dir", not_installed)
    monkeypatch.setenv(synthetic.TOKENIZER_ENV, str(tok))
    out = synthetic.random_checkpoint("bert-base", tmp_path / "ckpt")
    assert (out / "tokenizer.json").read_bytes() == (tok / "tokenizer.json").read_bytes()
    (cap,) = jaxattn.load(out).capture(["the quick brown fox"], what=("attention",))
    assert cap.tokens == ("[CLS]", "the", "quick", "brown", "fox", "[SEP]")

    monkeypatch.setenv(synthetic.TOKENIZER_ENV, str(tmp_path))  # no tokenizer.json there
    with pytest.raises(FileNotFoundError, match="JAXATTN_BENCH_TOKENIZER=.* no tokenizer.json"):
        synthetic.random_checkpoint("bert-base", tmp_path / "ckpt2")


def test_texts_over_the_limit_are_refused_with_benchs_own_advice(bert_checkpoint, tmp_path):
    from jaxattn.errors import InputError

    long = ["word " * 100] * 2  # the tiny model's limit is 67 tokens
    run = dict(conllu=None, n=2, repeats=1, model=str(bert_checkpoint), texts=long)
    with pytest.raises(InputError, match="bench times whole texts; leave such texts out with"):
        bench.run(**run)
    with pytest.raises(
        InputError, match="no text left to time: all 2 are over the model's limit of 67 tokens"
    ):
        bench.run(**run, too_long="skip")


# The decoder presets shrunk (each family's config spelling): the presets' paths are tested.
_TINY_DECODERS = {
    "gpt2-small": dict(n_embd=24, n_layer=2, n_head=3, n_positions=64),
    "llama-1b": dict(
        hidden_size=24,
        intermediate_size=20,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=6,
        max_position_embeddings=64,
        rope_scaling={  # Llama 3's scaling, its original length under the tiny maximum
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
    ),
    "qwen2-0.5b": dict(
        hidden_size=24,
        intermediate_size=20,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    ),
    "pythia-160m": dict(  # GPT-NeoX: 3 rotary dims of 6 (odd), a parallel residual
        hidden_size=24,
        intermediate_size=20,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
        rotary_pct=0.5,
    ),
}
# A preset named after its model rather than its family.
_FAMILY = {"pythia-160m": "gpt_neox"}


@pytest.mark.parametrize("name", sorted(_TINY_DECODERS))
def test_the_decoder_presets_load_as_their_family(name, tmp_path):
    """`bench --synthetic gpt2-small | llama-1b | qwen2-0.5b | pythia-160m`, shrunk: a
    decoder of the family with BERT's tokenizer, and (qwen2's, grouped-query) timed against
    transformers eager with attentions and plain SDPA (one preset runs the cases:
    they are the same code for all)."""
    import jaxattn
    from jaxattn.bench import synthetic

    assert name in synthetic.SHAPES and name in synthetic.DECODER_SHAPES
    path = synthetic.random_checkpoint(name, tmp_path / "ckpt", **_TINY_DECODERS[name])
    info = jaxattn.load(path).info
    assert info.causal and info.family == _FAMILY.get(name, name.split("-")[0])
    if name != "qwen2-0.5b":
        return
    assert info.num_key_value_heads == 2
    res = bench.run(None, n=2, repeats=1, model=str(path), texts=bench.synthetic_texts(9, 2))
    for case in ("a_transformers", "c_attention", "d_full", "f_transformers_forward"):
        assert res[case] > 0
    assert "(c) speed-up over (a)" in bench.format_result(res)


def test_the_llama_preset_has_llama_3_2_1b_shape():
    from jaxattn.bench.synthetic import DECODER_SHAPES

    cls, fields = DECODER_SHAPES["llama-1b"]
    assert cls == "LlamaConfig" and fields["rope_scaling"]["rope_type"] == "llama3"
    shape = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")
    assert tuple(fields[k] for k in shape) == (2048, 16, 32, 8)


def test_the_load_mix_of_a_decoder_sends_single_texts_within_its_layers_and_heads(tmp_path):
    """jaxattn loadtest against a decoder's server: the mix's pairs and its rich kind's
    layers 0, 5 and heads 1, 11 (MiniLM's) were refused by a 3-layer x 4-head Llama
    (and pairs by any decoder)."""

    from llama_fixture import make_llama_checkpoint

    import jaxattn
    from jaxattn.bench import mix

    engine = jaxattn.load(make_llama_checkpoint(tmp_path / "llama"), buckets=(32, 64))
    # a first pair of 27 tokens as one text, in the pair kind's 25..32; the others: > 32
    pool = ["I went to the store today.", *mix.FALLBACK[1:]]
    requests = mix.build_mix(engine, pool)
    kinds = {r.kind for r in requests}
    assert {"single", "pair", "rich"} <= kinds
    for r in requests:
        assert all(isinstance(t, str) for t in r.texts), r.kind  # no (a, b) pair
        engine.make_spec(r.what, r.layers, r.heads, r.dtype)  # in range: no UsageError
    rich = next(r for r in requests if r.kind == "rich")
    assert (rich.layers, rich.heads) == ((0, 2), (1, 3))
    pairs = {r.texts for r in requests if r.kind == "pair"}
    assert pairs == {(f"{pool[0]} {pool[1]}",)}  # the two sentences as one text
    # kinds none of whose texts fit are left out, not divided by zero
    assert "pair" not in {r.kind for r in mix.build_mix(engine, list(mix.FALLBACK))}


def test_synthetic_texts_have_the_asked_length_in_the_model_s_own_tokens(tmp_path):
    """A random Qwen2 with BERT's vocabulary files gets Qwen2's tokenizer class, which
    reads the words letter by letter: `synthetic_texts(16)` is 58 tokens there, so
    `bench --tokens 128` ran qwen2-0.5b at 492. `fitted_texts` counts with the model's
    own tokenizer."""
    import jaxattn
    from jaxattn.bench import synthetic
    from jaxattn.errors import InputError, UsageError

    tiny = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2)
    tiny |= dict(num_key_value_heads=1, head_dim=16, intermediate_size=24)
    path = synthetic.random_checkpoint("qwen2-0.5b", tmp_path / "qwen2", **tiny)
    engine = jaxattn.load(path)
    (words,) = engine.tokenize(bench.synthetic_texts(16, 1))
    assert words.length > 16  # the letter-by-letter reading this guards against
    for length in (3, 16, 37):
        texts = bench.fitted_texts(engine, length, 2)
        assert len(texts) == 2 and [t.length for t in engine.tokenize(texts)] == [length] * 2
    with pytest.raises(InputError, match="at most 32768 tokens"):
        bench.fitted_texts(engine, 32769, 1)
    with pytest.raises(UsageError, match="texts or tokens"):
        bench.run(None, n=1, model=str(path), texts=["a"], tokens=11)
    res = bench.run(None, n=1, repeats=1, model=str(path), tokens=11)
    assert res["tokens"] == 11 and res["n"] == 1
