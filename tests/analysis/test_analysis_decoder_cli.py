"""`jaxattn analyze` on a decoder (the tiny GPT-2): the decoder section, not the encoder ones."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from jaxattn.cli import main

sys.path.insert(0, str(Path(__file__).parents[1] / "families"))
from gpt2_fixture import make_gpt2_checkpoint  # noqa: E402

TEXTS = (
    "The cat sat on the mat. The cat sat on the mat.",
    "Hello, world.",
    "A",
)


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return make_gpt2_checkpoint(tmp_path_factory.mktemp("gpt2"))


def _analyze(gpt2, tmp_path, *flags):
    text = tmp_path / "in.txt"
    text.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "report.json"
    args = ["analyze", str(text), "--model", str(gpt2), "--out", str(out), "--quiet", *flags]
    return main(args), out


def test_analyze_writes_the_decoder_section(gpt2, tmp_path, capsys):
    rc, out = _analyze(gpt2, tmp_path)
    assert rc == 0
    assert "no dependency-head table" not in capsys.readouterr().err
    report = json.loads(out.read_text())
    meta = report["meta"]
    assert meta["decoder"] and meta["examples"] == 3
    heads = report["decoder_heads"]
    want = {"first", "prev", "self", "punct", "entropy", "induction", "duplicate"}
    assert set(heads) == want | {f"norm_{n}" for n in want - {"induction", "duplicate"}}
    assert all(len(v) == 3 and len(v[0]) == 3 for v in heads.values())
    assert all(x is not None for row in heads["induction"] for x in row)  # a repeated text
    assert report["head_stats"] == {} and report["patterns"] == {}
    assert set(meta["not_run"]) == {"head_stats", "patterns", "rollout", "flow", "dependency_heads"}
    assert "rollout" not in report and len(report["mixing_ratios"]["AttnRes-N"]) == 3
    md = out.with_suffix(".md").read_text()
    assert "## Decoder heads" in md and "Not computed for a decoder" in md


def test_analyze_stats_only_on_a_decoder(gpt2, tmp_path):
    rc, out = _analyze(gpt2, tmp_path, "--stats-only")
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["meta"]["what"] == ["decoder_head_stats", "decoder_norm_head_stats"]
    assert set(report["decoder_heads"]) == {
        *(n for n in ("first", "prev", "self", "punct", "entropy")),
        *(f"norm_{n}" for n in ("first", "prev", "self", "punct", "entropy")),
    }


def test_analyze_refuses_ablation_on_a_decoder(gpt2, tmp_path, capsys):
    rc, _ = _analyze(gpt2, tmp_path, "--ablate", "zero")
    assert rc == 2
    assert "--ablate is not run on a decoder" in capsys.readouterr().err


def test_analyze_saved_decoder_captures(gpt2, tmp_path):
    import jaxattn

    engine = jaxattn.load(gpt2)
    what = ("attention", "alpha_fx_norm", "decoder_head_stats", "decoder_norm_head_stats")
    (cap,) = engine.capture([TEXTS[0]], what=what)
    saved = tmp_path / "c.npz"
    cap.save(saved)
    for flags in ((), ("--stats-only",)):
        out = tmp_path / f"r{len(flags)}.json"
        args = ["analyze", str(saved), "--out", str(out), "--quiet", *flags]
        assert main(args) == 0
        report = json.loads(out.read_text())
        assert report["meta"]["decoder"] and "first" in report["decoder_heads"]
        assert ("induction" in report["decoder_heads"]) == (not flags)
