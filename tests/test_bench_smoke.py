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
    res = bench.run(path, n=2, repeats=1, model=str(bert_checkpoint))
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
