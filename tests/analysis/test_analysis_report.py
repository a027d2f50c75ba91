"""The corpus pass and report.json / report.md."""

from __future__ import annotations

import json

import numpy as np
import pytest
from analysis_helpers import PAIR_TOKENS, identity, make_capture, one_hot, uniform
from test_analysis_dependency import captures_and_sentences

from jaxattn.analysis import KOVALEVA_CLASSES, VIG_PATTERNS, CorpusAnalysis, write_report
from jaxattn.errors import UsageError


def pair_capture():
    att = np.stack([np.stack([identity(), one_hot(7)]), np.stack([uniform(), uniform()])])
    return make_capture(att, alpha_fx_norm=att * 2.0)


def test_report_without_parses(tmp_path):
    corpus = CorpusAnalysis()
    corpus.update(pair_capture())
    corpus.update(pair_capture())
    report = corpus.report(meta={"model": "hand-made"})
    assert report["meta"]["examples"] == 2 and report["meta"]["tokens"] == 2 * len(PAIR_TOKENS)
    # Attention-only captures give the weight-based mixing ratios (Kobayashi et al. 2021).
    # Layer 0 averages identity and one-hot-on-7 heads: r_i = 1/2 except r_7 = 0;
    # layer 1 is uniform over 19 tokens: r_i = 18/19.
    assert set(report["mixing_ratios"]) == {"Attn-W", "AttnRes-W"}
    np.testing.assert_allclose(report["mixing_ratios"]["Attn-W"], [9 / 19, 18 / 19], atol=1e-6)
    np.testing.assert_allclose(
        report["head_stats"]["self"], [[1.0, 1 / 19], [1 / 19, 1 / 19]], atol=1e-6
    )
    # norm-based weights of a rescaled map are the map itself
    assert report["head_stats"]["norm_sep"] == report["head_stats"]["sep"]
    assert set(report["patterns"]) == {*KOVALEVA_CLASSES, *VIG_PATTERNS}
    assert report["patterns"]["diagonal"] == [0.5, 0.0]
    assert "dependency_heads" not in report
    assert np.shape(report["head_distance"]["mds"]) == (2, 2, 2)
    assert set(report["rollout"]) == {"attention", "norm"}
    json_path, md_path = write_report(report, tmp_path / "out" / "report.json")
    assert json.loads(json_path.read_text()) == report
    md = md_path.read_text()
    assert md_path.name == "report.md" and "## Pattern fractions per layer" in md
    assert "## Mixing ratios" in md and "| 0 | 0.474 |" in md


def test_a_report_path_named_like_its_markdown_summary_is_refused(tmp_path):
    corpus = CorpusAnalysis()
    corpus.update(pair_capture())
    report = corpus.report()
    with pytest.raises(UsageError, match=r"report's path .*r\.md is a \.md name.* \(.*r\.json\)"):
        write_report(report, tmp_path / "r.md")
    assert list(tmp_path.iterdir()) == []


def test_report_with_parses_and_mixing_ratios(tmp_path):
    corpus = CorpusAnalysis(head_distance=False)
    for cap, sent in captures_and_sentences():
        corpus.update(cap, sent)
    report = corpus.report(mixing_ratios={"Attn-W": np.array([0.9])})
    assert report["dependency_heads"]["det"]["best_head"] == [0, 0]
    assert report["meta"]["parsed_sentences"] == 3
    assert report["mixing_ratios"] == {"Attn-W": [0.9]}
    assert "head_distance" not in report
    _, md = write_report(report, tmp_path / "r.json")
    text = md.read_text()
    assert "| det | 2 | 0-0 | dep_to_head | 100.0 | +1 | 100.0 |" in text
    # the "all" row first (12 words, 3 roots and 2 punctuation marks included), and the
    # definition's choices
    assert list(report["dependency_heads"])[0] == "all"
    assert "| **all** | 12 | 0-0 | dep_to_head | 66.7 | +1 | 41.7 |" in text
    assert report["meta"]["dependency"]["baseline_offsets"] == [-3, 2]
    assert "offsets -3..+2, clamped" in text and "mean of its pieces' rows" in text
    assert "[SEP]→[SEP]" in text and "uniform attention would give" in text
    assert "Attn-W" in text


def test_a_pre_norm_models_captures_say_so_in_meta():
    """A capture whose model config says norm "pre" (ModernBERT's) gives meta.pre_norm,
    which report.md reads; a post-LN model's (BERT's), or one without a config (a
    server's), gives none."""
    import dataclasses

    from jaxattn.capture import frozen

    def analysed(config):
        corpus = CorpusAnalysis()
        cap = dataclasses.replace(pair_capture(), provenance=frozen({"config": config}))
        corpus.update(cap)
        return corpus.report(meta={"model": "hand-made"})

    assert analysed({"norm": "pre"})["meta"]["pre_norm"] is True
    assert "pre_norm" not in analysed({"norm": "post"})["meta"]
    assert "pre_norm" not in analysed({})["meta"]
    # told (`jaxattn analyze` reads a served capture's family): no config needed
    corpus = CorpusAnalysis(pre_norm=True)
    corpus.update(pair_capture())
    assert corpus.report(meta={"model": "hand-made"})["meta"]["pre_norm"] is True
