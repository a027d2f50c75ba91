"""Stores (and capture files) as INPUT of analyze and view: results equal a fresh capture.

A tiny parsed corpus is dumped once with the tiny BERT; `jaxattn analyze STORE
--conllu FILE` must then give the report `jaxattn analyze FILE` gives by
capturing afresh, and `jaxattn view STORE` the captures a fresh capture gives.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from jaxattn.analysis import MIXING_NEEDS
from jaxattn.cli import main
from jaxattn.cli.corpus import read_inputs
from jaxattn.errors import UsageError

SENTENCES = [
    (
        "a",
        ["The", "cat", "sat", "on", "the", "mat", "."],
        [2, 3, 0, 6, 6, 3, 3],
        ["det", "nsubj", "root", "case", "det", "obl", "punct"],
    ),
    (
        "b",
        ["I", "bought", "fresh", "strawberries", ","],
        [2, 0, 4, 2, 2],
        ["nsubj", "root", "amod", "obj", "punct"],
    ),
    ("c", ["He", "ran", "home"], [2, 0, 2], ["nsubj", "root", "obj"]),
]
NORMS = ("alpha_fx_norm", *MIXING_NEEDS)
# Report fields that say how it was made, not what it found.
HOW = {
    "input",
    "captured_by",
    "what",
    "seconds",
    "machine",
    "dtype",
    "too_long",
    "conllu",
    "not_in_input",
}


def _conllu(sentences) -> str:
    blocks = []
    for sid, words, heads, rels in sentences:
        rows = [
            f"{i + 1}\t{w}\t{w.lower()}\tX\tX\t_\t{h}\t{r}\t_\t_"
            for i, (w, h, r) in enumerate(zip(words, heads, rels, strict=True))
        ]
        blocks.append(f"# sent_id = {sid}\n" + "\n".join(rows) + "\n")
    return "\n".join(blocks)


@pytest.fixture(scope="module")
def dumped(bert_checkpoint, tmp_path_factory):
    """(the CoNLL-U file, float32 stores of it: with attention and every norm, with attention
    alone, with attention and alpha_fx_norm but no mixing quantity)."""
    root = tmp_path_factory.mktemp("saved_inputs")
    conllu = root / "tiny.conllu"
    conllu.write_text(_conllu(SENTENCES), encoding="utf-8")
    full, bare, mid = root / "full.zarr", root / "bare.zarr", root / "mid.zarr"
    what = ",".join(dict.fromkeys(("attention", "queries", *NORMS)))
    for out, w in ((full, what), (bare, "attention"), (mid, "attention,alpha_fx_norm")):
        args = [
            "dump",
            str(conllu),
            "--model",
            str(bert_checkpoint),
            "--out",
            str(out),
            "--what",
            w,
            "--shard-size",
            "2",
            "--quiet",
        ]
        assert main(args) == 0
    return conllu, full, bare, mid


def _report(tmp_path, name: str, *args: str) -> dict:
    out = tmp_path / name / "report.json"
    assert main(["analyze", *args, "--out", str(out), "--quiet"]) == 0
    return json.loads(out.read_text())


def _assert_close(got, want, where: str = "report") -> None:
    if isinstance(want, dict):
        assert got.keys() == want.keys(), where
        for k in want:
            _assert_close(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list | tuple):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _assert_close(g, w, f"{where}[{i}]")
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6), where
    else:
        assert got == want, where


def test_analyze_a_store_equals_analyzing_its_input(dumped, bert_checkpoint, tmp_path):
    conllu, full, _, _ = dumped
    fresh = _report(tmp_path, "fresh", str(conllu), "--model", str(bert_checkpoint))
    stored = _report(tmp_path, "stored", str(full), "--conllu", str(conllu))
    assert fresh["meta"]["parsed_sentences"] == stored["meta"]["parsed_sentences"] == 3
    assert stored["meta"]["captured_by"] == f"store {full}"
    for report in (fresh, stored):
        for key in HOW:
            report["meta"].pop(key, None)
    _assert_close(stored, fresh)


def test_a_store_lacking_a_needed_quantity_names_it(dumped, tmp_path, capsys):
    _, _, bare, _ = dumped
    out = str(tmp_path / "r.json")
    assert main(["analyze", str(bare), "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "alpha_fx_norm" in err and "--no-norm" in err, err
    assert "--what attention,alpha_fx_norm,mixing_ratio" in err, err
    report = _report(tmp_path, "bare", str(bare), "--no-norm", "--limit", "2")
    assert report["meta"]["examples"] == 2 and "dependency_heads" not in report


@pytest.mark.parametrize(
    "extra, needle",
    [
        # not "(it needs a model)": what needs one, the flag or the input?
        (["--model", "x"], "as stored without running a model: drop --model"),
        (["--ablate", "zero"], "as stored without running a model: drop --ablate"),
        # the engine's options, else silently unused
        (["--attention", "dense"], "as stored without running a model: drop --attention"),
        (["--attention-block", "64"], "without running a model: drop --attention-block"),
        (["--stats-only"], "head_stats"),
    ],
)
def test_store_input_refuses_what_needs_a_model(dumped, tmp_path, capsys, extra, needle):
    _, full, _, _ = dumped
    assert main(["analyze", str(full), "--out", str(tmp_path / "r.json"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle in err, err


@pytest.mark.parametrize(
    "stored, flags, advice",
    [
        (("head_stats",), ["--stats-only"], "add --no-norm"),
        (("attention", "alpha_fx_norm"), ["--stats-only"], "drop --stats-only"),
        (("attention",), [], "add --no-norm"),
        (("attention",), ["--stats-only"], "add --no-norm and drop --stats-only"),
        (("head_stats", "norm_head_stats"), ["--no-norm"], "add --stats-only"),
        (("queries",), [], ""),
    ],
)
def test_a_store_lacking_what_the_flags_need_gets_the_flags_it_allows(stored, flags, advice):
    from jaxattn.cli.analyze_saved import what_the_input_allows

    args = argparse.Namespace(stats_only="--stats-only" in flags, no_norm="--no-norm" in flags)
    assert what_the_input_allows(stored, args) == advice


@pytest.mark.parametrize(
    "stored, flags, advice",
    [
        (("decoder_head_stats", "decoder_norm_head_stats"), [], "add --stats-only"),
        (("decoder_head_stats",), [], "add --stats-only --no-norm"),
        (("decoder_head_stats",), ["--stats-only"], "add --no-norm"),
        (("head_stats", "norm_head_stats"), [], ""),  # an encoder's: not a decoder's
    ],
)
def test_a_decoders_stored_statistics_get_stats_only_as_advice(stored, flags, advice):
    from jaxattn.cli.analyze_saved import what_the_input_allows

    args = argparse.Namespace(stats_only="--stats-only" in flags, no_norm="--no-norm" in flags)
    assert what_the_input_allows(stored, args, decoder=True) == advice


def test_a_decoders_statistics_file_is_refused_with_the_flag_that_reads_it(tmp_path, capsys):
    """A saved decoder capture of decoder_head_stats alone, analysed without flags: the
    refusal says --stats-only reads it, which then gives the report."""
    from jaxattn.capture import Capture

    table = np.random.default_rng(0).random((2, 3, 5)).astype(np.float32)
    cap = Capture(
        tokens=("<s>", "a", "b", "a"),
        sentence_b_start=None,
        layers=(0, 1),
        heads=(0, 1, 2),
        dtype="float32",
        tensors={"decoder_head_stats": table},
        provenance={"model": "tiny", "causal": True},
    )
    saved = tmp_path / "stats.npz"
    cap.save(saved)
    out = str(tmp_path / "r.json")
    assert main(["analyze", str(saved), "--out", out]) == 2
    err = capsys.readouterr().err
    assert "needs attention" in err and err.strip().endswith("(or add --stats-only --no-norm)")
    assert main(["analyze", str(saved), "--out", out, "--stats-only", "--no-norm"]) == 0
    got = json.loads((tmp_path / "r.json").read_text())["decoder_heads"]["first"]
    np.testing.assert_allclose(got, table[..., 0], atol=1e-6)  # report.json: 6 digits


def test_a_conllu_file_that_is_not_the_stores_source_is_refused(dumped, tmp_path):
    _, full, _, _ = dumped
    other = tmp_path / "other.conllu"
    other.write_text(_conllu([SENTENCES[1], SENTENCES[0]]), encoding="utf-8")
    from jaxattn.cli.saved import saved_parses
    from jaxattn.store import open_store

    with pytest.raises(UsageError, match="record 0 is 'a', the file has sentence 'b'"):
        saved_parses(open_store(full), str(other), str(full))


def test_view_reads_a_store_as_its_captures(dumped, engines, tmp_path):
    _, full, _, _ = dumped
    caps = read_inputs([str(full)], limit=2)
    texts = [" ".join(words) for _, words, _, _ in SENTENCES[:2]]
    assert [c.text for c in caps] == texts  # the manifest keeps the texts
    want = engines["bert"].capture(texts, what=("attention", "queries"))
    for got, ref in zip(caps, want, strict=True):
        assert got.tokens == ref.tokens
        np.testing.assert_allclose(got.attention, ref.attention, atol=1e-6)
        np.testing.assert_allclose(got.queries, ref.queries, atol=1e-5)
    html = tmp_path / "v.html"
    assert main(["view", str(full), "--out", str(html), "--views", "head"]) == 0
    assert html.stat().st_size > 1000
    with pytest.raises(UsageError, match="brings the examples to 3, over the page.s cap of 2"):
        read_inputs([str(full)], cap=2)


def test_mixing_quantities_a_store_lacks_are_said_and_recorded(dumped, tmp_path, capsys):
    _, _, _, mid = dumped
    report = _report(tmp_path, "mid", str(mid))
    err = capsys.readouterr().err
    assert "lacks mixing_ratio" in err and "--what mixing_ratio" in err, err
    assert report["meta"]["not_in_input"] == ["mixing_ratio"]
    assert set(report["mixing_ratios"]) == {"Attn-W", "AttnRes-W"}


def test_only_a_whole_url_of_a_store_scheme_is_a_store(dumped):
    from jaxattn.cli.saved import is_store

    assert is_store("gs://bucket/ewt.zarr") and is_store("file:///data/ewt.zarr")
    for text in ("Visit https://example.com today.", "https://example.com", "gs://a b"):
        assert not is_store(text), text
    items = read_inputs(["See https://x.org now.", "file:///no/such/store"][:1])
    assert items == ["See https://x.org now."]
    # A web server's copy of a store is named as one, and refused: http cannot list its parts.
    assert is_store("https://example.com/ewt.zarr/")
    with pytest.raises(UsageError, match="not readable over http.*gs://, s3://, file:// URL"):
        read_inputs(["https://example.com/ewt.zarr"])


def test_limit_and_cap_count_what_a_page_would_hold(dumped):
    _, full, _, _ = dumped
    with pytest.raises(UsageError, match="brings the examples to 3, over the page's cap of 2"):
        read_inputs([str(full)], limit=5, cap=2)
    items = read_inputs(["a", "b", "c", str(full)], limit=2, cap=2)
    assert items == ["a", "b"]  # the store is not read past the limit


def test_a_capture_file_gets_its_parse_by_text(dumped, engines, tmp_path):
    conllu, _, _, _ = dumped
    from jaxattn.cli.saved import saved_parses

    text = " ".join(SENTENCES[2][1])
    cap = engines["bert"].capture([text], what=("attention",))[0]
    assert cap.text == text
    (parse,) = saved_parses([cap], str(conllu), "c.npz")
    assert parse.words == tuple(SENTENCES[2][1])
    other = engines["bert"].capture(["He ran away"], what=("attention",))[0]
    with pytest.raises(UsageError, match="is 'He ran away', which is no sentence of the file"):
        saved_parses([other], str(conllu), "c.npz")


def test_a_static_view_of_a_store_names_the_quantity_it_lacks(dumped, tmp_path, capsys):
    _, _, bare, _ = dumped
    out = tmp_path / "b.svg"
    assert main(["view", str(bare), "--kind", "norm", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "needs alpha_fx_norm" in err, err
    assert "--what attention,alpha_fx_norm" in err and not out.exists(), err
