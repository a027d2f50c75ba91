"""The report explains itself: what each mixing-ratio column means, and that (and why) the
dependency-head table is missing when the input carries no parse (report.md, report.json
meta.not_run, and one stderr line from `jaxattn analyze`)."""

from __future__ import annotations

import json

import numpy as np
from analysis_helpers import identity, make_capture, uniform
from test_analysis_cli import CONLLU
from test_analysis_dependency import captures_and_sentences

from jaxattn.analysis import CorpusAnalysis, render_markdown
from jaxattn.analysis.markdown import MIXING_COLUMNS
from jaxattn.analysis.mixing import MEASURES
from jaxattn.analysis.report import NO_PARSE, NO_PARSE_STATS
from jaxattn.cli import main


def _capture():
    att = np.stack([np.stack([identity(), uniform()])])
    return make_capture(att, alpha_fx_norm=att)


def test_every_mixing_column_is_defined_in_the_report():
    assert set(MIXING_COLUMNS) == set(MEASURES)
    corpus = CorpusAnalysis(head_distance=False)
    corpus.update(_capture())
    report = corpus.report(mixing_ratios={m: [0.5] for m in MEASURES})
    md = render_markdown(report)
    table = md[md.index("## Mixing ratios") :]
    assert "| layer | Attn-W | Attn-N | AttnRes-W | AttnRes-N | AttnResLn-N |" in table
    assert "0: from itself only, 1: from the others only" in table
    for measure, meaning in MIXING_COLUMNS.items():
        assert f"- {measure}: {meaning}\n" in table
    assert table.index("- AttnResLn-N:") < table.index("| layer |")  # defined before shown
    # only the columns the report has are defined
    report = corpus.report()
    assert set(report["mixing_ratios"]) == {"Attn-W", "AttnRes-W"}
    md = render_markdown(report)
    assert "- Attn-W: attention weights alone" in md and "- Attn-N:" not in md


def test_a_report_without_parses_says_the_dependency_table_was_not_computed():
    corpus = CorpusAnalysis(head_distance=False)
    corpus.update(_capture())
    report = corpus.report()
    assert "dependency_heads" not in report
    assert report["meta"]["not_run"] == {"dependency_heads": NO_PARSE}
    assert f"## Dependency heads\n\nNot computed: {NO_PARSE}.\n" in render_markdown(report)
    stats_only = CorpusAnalysis(head_stats_only=True)
    stats_only.update(_capture())
    assert stats_only.report()["meta"]["not_run"] == {"dependency_heads": NO_PARSE_STATS}
    parsed = CorpusAnalysis(head_distance=False)
    for cap, sentence in captures_and_sentences():
        parsed.update(cap, sentence)
    report = parsed.report()
    assert "not_run" not in report["meta"] and "Not computed" not in render_markdown(report)


def test_analyze_says_when_the_input_carries_no_parse(bert_checkpoint, tmp_path, capsys):
    text = tmp_path / "corpus.txt"
    text.write_text("The cat sat on the mat .\nI bought fresh strawberries .\n")
    conllu = tmp_path / "tiny.conllu"
    conllu.write_text(CONLLU, encoding="utf-8")
    model = ["--model", str(bert_checkpoint), "--quiet", "--no-head-distance"]
    out = tmp_path / "r.json"
    assert main(["analyze", str(text), "--out", str(out), *model]) == 0
    err = capsys.readouterr().err
    reason = (
        f"INPUT {text} carries no parse: give --conllu FILE, a CoNLL-U parse of the same "
        "sentences (or a CoNLL-U INPUT)"
    )
    assert f"jaxattn analyze: no dependency-head table: {reason}\n" in err
    assert json.loads(out.read_text())["meta"]["not_run"] == {"dependency_heads": reason}
    assert f"Not computed: {reason}." in out.with_suffix(".md").read_text()
    # a parse (the input itself, or --conllu): no such line, and the table
    for argv in ([str(conllu)], [str(text), "--conllu", str(conllu)]):
        assert main(["analyze", *argv, "--out", str(out), "--overwrite", *model]) == 0
        assert "no dependency-head table" not in capsys.readouterr().err
        report = json.loads(out.read_text())
        assert "not_run" not in report["meta"] and report["dependency_heads"]
    # saved captures carry no parse either: --conllu is the only way
    saved = tmp_path / "c.npz"
    assert (
        main(
            [
                "capture",
                "The cat sat .",
                "--what",
                "attention,alpha_fx_norm",
                "--out",
                str(saved),
                "--model",
                str(bert_checkpoint),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["analyze", str(saved), "--out", str(out), "--overwrite", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert f"no dependency-head table: INPUT {saved} carries no parse: give --conllu FILE, " in err
    assert "(or a CoNLL-U INPUT)" not in err
