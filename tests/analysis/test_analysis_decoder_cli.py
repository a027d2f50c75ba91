"""`jaxattn analyze` on a decoder (the tiny GPT-2): the decoder section, not the encoder ones."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gpt2_fixture import make_gpt2_checkpoint  # noqa: E402

from jaxattn.cli import main

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
    # The model-level analyses of a local engine (each checked against references in
    # test_analysis_ov_circuit.py and test_analysis_bos_sinks.py).
    ov = report["ov_copying"]
    assert "eigenvalues" in ov["definition"] and len(ov["score"]) == 3
    assert all(-1 <= x <= 1 for row in ov["score"] for x in row)
    sinks = report["bos_sinks"]
    assert (sinks["bos_token"], sinks["examples"], sinks["skipped"]) == ("<|endoftext|>", 2, 1)
    assert set(sinks) >= {"bos", "first_after_bos", "first_without_bos", "shift"}
    assert "### OV copying scores" in md and "### Attention sinks with and without BOS" in md


def test_analyze_stats_only_on_a_decoder(gpt2, tmp_path):
    rc, out = _analyze(gpt2, tmp_path, "--stats-only")
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["meta"]["what"] == ["decoder_head_stats", "decoder_norm_head_stats"]
    assert set(report["decoder_heads"]) == {
        *(n for n in ("first", "prev", "self", "punct", "entropy")),
        *(f"norm_{n}" for n in ("first", "prev", "self", "punct", "entropy")),
    }


def test_analyze_ablates_a_decoder_with_its_lm_loss(gpt2, tmp_path):
    rc, out = _analyze(gpt2, tmp_path, "--ablate", "zero", "--sink-examples", "0")
    assert rc == 0
    report = json.loads(out.read_text())
    res = report["head_ablation"]
    assert res["causal"] and res["mlm_loss"] is None and res["lm_loss"] > 0
    assert len(res["lm_loss_delta"]) == 9 and all(x is not None for x in res["lm_loss_delta"])
    assert report["meta"]["not_run"]["bos_sinks"] == "--sink-examples 0"
    md = out.with_suffix(".md").read_text()
    assert "## Head ablation" in md and "LM loss change" in md and "cos first token" in md


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
        # the model-level analyses are not in the report, and it says why (was: silent)
        assert "ov_copying" not in report and "bos_sinks" not in report
        not_run = report["meta"]["not_run"]
        for name in ("ov_copying", "bos_sinks"):
            assert "analyse the texts with --model, not the stored captures" in not_run[name]
        assert "- bos_sinks: needs the model's weights" in out.with_suffix(".md").read_text()


def test_analyze_leaves_out_what_a_parallel_residual_refuses(tmp_path):
    """Pythia's parallel residual refuses mixing_ratio (its AttnResLn-N measure has no
    norm): the report has the weight measures, here from the heads' mean attention w
    (Attn-W: 1 - w_ii; AttnRes-W, w/2 + I/2: (1 - w_ii) / 2, each row summing to 1),
    over query rows 1 .. T-1 of each text (a decoder's row 0 sees only itself), and
    meta names what the model refused."""
    from gpt_neox_fixture import make_gpt_neox_checkpoint

    import jaxattn

    path = make_gpt_neox_checkpoint(tmp_path / "neox")
    rc, out = _analyze(path, tmp_path, "--sink-examples", "0")
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["meta"]["refused_by_the_model"] == ["mixing_ratio"]
    assert "mixing_ratio" not in report["meta"]["what"]
    mixing = report["mixing_ratios"]
    assert set(mixing) == {"Attn-W", "AttnRes-W"}
    caps = jaxattn.load(path).capture(list(TEXTS), what="attention")
    own = [np.diagonal(c.attention.astype(np.float64).mean(1), 0, 1, 2)[:, 1:] for c in caps]
    attn_w = sum((1 - w).sum(-1) for w in own) / sum(w.shape[-1] for w in own)  # [L]
    np.testing.assert_allclose(mixing["Attn-W"], attn_w, atol=1e-6)
    np.testing.assert_allclose(mixing["AttnRes-W"], attn_w / 2, atol=1e-6)


def test_saved_captures_of_a_parallel_residual_are_not_asked_for_what_it_refuses(tmp_path, capsys):
    """Stored captures of a Pythia: the advice and the warning no longer ask for
    mixing_ratio ('dump it again with --what attention,alpha_fx_norm,mixing_ratio', which
    that model refuses), and meta names it as refused, as for a live analysis."""
    from gpt_neox_fixture import make_gpt_neox_checkpoint

    import jaxattn

    engine = jaxattn.load(make_gpt_neox_checkpoint(tmp_path / "neox"))
    for what in (("attention",), ("attention", "alpha_fx_norm")):
        (cap,) = engine.capture([TEXTS[0]], what=what)
        cap.save(tmp_path / f"{len(what)}.npz")
    out = tmp_path / "r.json"
    args = ["analyze", str(tmp_path / "1.npz"), "--out", str(out), "--quiet"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--what attention,alpha_fx_norm (or add --no-norm)" in err, err
    args[1] = str(tmp_path / "2.npz")
    assert main(args) == 0
    assert "mixing_ratio" not in capsys.readouterr().err
    meta = json.loads(out.read_text())["meta"]
    assert meta["refused_by_the_model"] == ["mixing_ratio"] and meta["not_in_input"] == []
