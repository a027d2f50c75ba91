"""`jaxattn analyze` end to end on tiny checkpoints: CoNLL-U and text inputs, local and --server."""

from __future__ import annotations

import json

import pytest

from jaxattn.cli import main

CONLLU = """\
# sent_id = a
1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_
2\tcat\tcat\tNOUN\tNN\t_\t3\tnsubj\t_\t_
3\tsat\tsit\tVERB\tVBD\t_\t0\troot\t_\t_
4\ton\ton\tADP\tIN\t_\t6\tcase\t_\t_
5\tthe\tthe\tDET\tDT\t_\t6\tdet\t_\t_
6\tmat\tmat\tNOUN\tNN\t_\t3\tobl\t_\t_
7\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_

# sent_id = b
1\tI\tI\tPRON\tPRP\t_\t2\tnsubj\t_\t_
2\tbought\tbuy\tVERB\tVBD\t_\t0\troot\t_\t_
3\tfresh\tfresh\tADJ\tJJ\t_\t4\tamod\t_\t_
4\tstrawberries\tstrawberry\tNOUN\tNNS\t_\t2\tobj\t_\t_
5\t,\t,\tPUNCT\t,\t_\t2\tpunct\t_\t_
6\tCafé\tcafé\tPROPN\tNNP\t_\t2\tobl\t_\t_
"""


@pytest.fixture
def conllu(tmp_path):
    path = tmp_path / "tiny.conllu"
    path.write_text(CONLLU, encoding="utf-8")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_analyze_conllu_locally(family, checkpoint_dirs, conllu, tmp_path):
    out = tmp_path / "out" / "report.json"
    rc = main(
        [
            "analyze",
            str(conllu),
            "--model",
            str(checkpoint_dirs[family]),
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0
    report = json.loads(out.read_text())
    meta = report["meta"]
    assert meta["examples"] == 2 and meta["parsed_sentences"] == 2
    assert meta["what"] == ["attention", "alpha_fx_norm", "mixing_ratio"]  # each once
    assert meta["unaligned_sentences"] == 0, meta["unaligned_examples"]
    assert report["dependency_heads"]["det"]["count"] == 2
    assert report["dependency_heads"]["det"]["baseline_offset"] == 1
    assert set(report["dependency_heads_norm"]) == set(report["dependency_heads"])
    layers, heads = len(meta["layers"]), len(meta["heads"])
    assert all(len(v) == layers and len(v[0]) == heads for v in report["head_stats"].values())
    assert all(len(v) == layers for v in report["patterns"].values())
    assert (out.parent / "report.md").is_file()
    # every Kobayashi et al. 2021 measure, one ratio per layer, each in [0, 1]
    assert set(report["mixing_ratios"]) == {
        "Attn-W",
        "Attn-N",
        "AttnRes-W",
        "AttnRes-N",
        "AttnResLn-N",
    }
    assert all(
        len(v) == layers and all(0 <= x <= 1 for x in v) for v in report["mixing_ratios"].values()
    )


def test_analyze_with_head_ablation(checkpoint_dirs, conllu, tmp_path):
    out = tmp_path / "report.json"
    args = [
        "analyze",
        str(conllu),
        "--model",
        str(checkpoint_dirs["bert"]),
        "--out",
        str(out),
        "--quiet",
        "--no-head-distance",
        "--ablate",
        "uniform",
    ]
    assert main(args) == 0
    abl = json.loads(out.read_text())["head_ablation"]
    assert abl["mode"] == "uniform" and abl["examples"] == 2 and len(abl["heads"]) == 9
    assert all(-1 <= c <= 1 + 1e-6 for c in abl["cos_cls"]) and abl["mlm_loss"] is None
    assert "## Head ablation" in (tmp_path / "report.md").read_text()


def test_ablation_refuses_a_server(conllu, tmp_path, capsys):
    args = [
        "analyze",
        str(conllu),
        "--server",
        "127.0.0.1:1",
        "--out",
        str(tmp_path / "r.json"),
        "--ablate",
        "zero",
    ]
    assert main(args) == 2
    assert "local engine" in capsys.readouterr().err


@pytest.mark.slow
def test_analyze_text_pairs_through_a_server(engines, tmp_path):
    from service.server import create_server

    text = tmp_path / "pairs.txt"
    text.write_text(
        "I went to the store.\tAt the store, I bought fresh strawberries.\n\n"
        "The cat sat on the mat.\n",
        encoding="utf-8",
    )
    server, port = create_server(engines["bert"], "127.0.0.1:0")
    server.start()
    try:
        out = tmp_path / "r.json"
        rc = main(
            [
                "analyze",
                str(text),
                "--server",
                f"127.0.0.1:{port}",
                "--out",
                str(out),
                "--no-norm",
                "--quiet",
            ]
        )
    finally:
        server.stop(0)
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["meta"]["examples"] == 2 and "dependency_heads" not in report
    assert report["meta"]["captured_by"].startswith("server")
    assert "norm_sep" not in report["head_stats"]


def test_analyze_rejects_a_line_with_two_tabs(tmp_path, capsys):
    text = tmp_path / "bad.txt"
    text.write_text("a\tb\tc\n", encoding="utf-8")
    assert main(["analyze", str(text), "--out", str(tmp_path / "r.json")]) == 1  # bad data
    assert "more than one tab" in capsys.readouterr().err


def test_analyze_refuses_a_report_named_like_its_markdown_summary(conllu, tmp_path, capsys):
    """--out r.md: the summary, r.md too, would replace the JSON report. Refused before
    any model loads, nothing written."""
    for name in ("r.md", "r.MD"):
        assert main(["analyze", str(conllu), "--out", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert f"--out {tmp_path / name} is a .md name, which the report's Markdown" in err
        assert f"give the JSON report a .json name ({tmp_path / 'r.json'})" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.conllu"]


def test_analyze_reads_every_input_format(checkpoint_dirs, tmp_path):
    """The one input reader: JSONL and 'A ||| B' pairs work in analyze as in dump and view."""
    jsonl = tmp_path / "in.jsonl"
    lines = (
        '{"text": "I went to the store.", "text_b": "I bought fresh strawberries."}',
        '{"text": "The cat sat on the mat ||| on the mat"}',
    )  # a JSONL text is taken whole
    jsonl.write_text("\n".join(lines) + "\n", encoding="utf-8")
    text = tmp_path / "in.txt"
    text.write_text("I went to the store. ||| I bought fresh strawberries.\n", encoding="utf-8")
    for path, examples in ((jsonl, 2), (text, 1)):
        out = tmp_path / f"{path.suffix[1:]}.json"
        args = [
            "analyze",
            str(path),
            "--model",
            str(checkpoint_dirs["bert"]),
            "--out",
            str(out),
            "--quiet",
            "--no-head-distance",
            "--no-norm",
        ]
        assert main(args) == 0
        assert json.loads(out.read_text())["meta"]["examples"] == examples


def test_analyze_dependency_variants(checkpoint_dirs, conllu, tmp_path, capsys):
    out = tmp_path / "report.json"
    args = [
        "analyze",
        str(conllu),
        "--model",
        str(checkpoint_dirs["bert"]),
        "--quiet",
        "--no-head-distance",
        "--no-norm",
    ]
    variant = [
        "--word-rows",
        "first",
        "--directions",
        "dep_to_head, head_row",
        "--no-possessive-rule",
        "--baseline-offsets",
        "-5",
        "5",
    ]
    assert main([*args, "--out", str(out), *variant]) == 0
    report = json.loads(out.read_text())
    assert report["meta"]["dependency"] == {
        "word_rows": "first",
        "directions": ["dep_to_head", "head_row"],
        "possessive_rule": False,
        "baseline_offsets": [-5, 5],
        "relations": "full",
    }
    table = report["dependency_heads"]
    assert list(table)[0] == "all" and table["all"]["count"] == 13  # every word, roots too
    assert {row["direction"] for row in table.values()} <= {"dep_to_head", "head_row"}
    md = (tmp_path / "report.md").read_text()
    assert "| **all** | 13 |" in md and "offsets -5..+5" in md and "first piece" in md
    for bad, message in (
        (["--directions", "up"], "distinct names"),
        (["--baseline-offsets", "2", "-3"], "lower offset first"),
        (["--word-rows", "max"], "invalid choice"),
        (
            ["--stats-only", "--word-rows", "first", "--no-possessive-rule"],
            "--word-rows, --no-possessive-rule choose how the dependency table is scored",
        ),
    ):
        capsys.readouterr()
        assert main([*args, "--out", str(tmp_path / "x.json"), *bad]) == 2
        assert message in capsys.readouterr().err


def test_the_cli_spells_the_analysis_names():
    from jaxattn.analysis import CLARK_DIRECTIONS, DIRECTIONS, WORD_ROWS
    from jaxattn.analysis.dependency_rules import BASELINE_OFFSETS
    from jaxattn.analysis.flow import MAX_TOKENS
    from jaxattn.cli import analysis_flags as flags

    assert (flags.WORD_ROWS, flags.DIRECTIONS) == (WORD_ROWS, DIRECTIONS)
    assert (flags.CLARK_DIRECTIONS, flags.BASELINE_OFFSETS) == (CLARK_DIRECTIONS, BASELINE_OFFSETS)
    assert flags.FLOW_MAX_TOKENS == MAX_TOKENS


def test_analyze_with_every_text_skipped_says_so(checkpoint_dirs, tmp_path, capsys):
    long = tmp_path / "long.txt"
    long.write_text("word " * 100 + "\n" + "store " * 90 + "\n", encoding="utf-8")
    out = tmp_path / "report.json"
    model = str(checkpoint_dirs["bert"])
    args = ["analyze", str(long), "--model", model, "--out", str(out), "--quiet"]
    assert main([*args, "--too-long", "skip"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "jaxattn analyze: error: every text was skipped (--too-long skip): nothing to analyse"
    )
    assert not out.exists()
