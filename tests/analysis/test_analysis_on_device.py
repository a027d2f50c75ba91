"""Clark et al.'s head statistics computed on the device equal the host's, and analyze uses them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from clark_reference import avg_attns, entropies
from hf_fixtures import EXAMPLE_A, EXAMPLE_B

from jaxattn.analysis import CorpusAnalysis, capture_weights, head_statistics
from jaxattn.cli import main
from jaxattn.errors import UsageError
from jaxattn.quantities import HEAD_STATS

TEXTS = [EXAMPLE_A, (EXAMPLE_A, EXAMPLE_B), "", "a, b. c, d; e ... f"]
MAPS = ("attention", "alpha_fx_norm")
STATS = ("head_stats", "norm_head_stats")


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_device_statistics_equal_the_host_implementation(engines, family):
    caps = engines[family].capture(TEXTS, what=MAPS + STATS, layers=[0, 2], heads=[2, 0])
    for cap in caps:
        assert cap.head_stats.shape == (2, 2, len(HEAD_STATS))
        for kind, quantity in (("attention", "head_stats"), ("norm", "norm_head_stats")):
            host = head_statistics(capture_weights(cap, kind), cap.tokens)
            device = cap.array(quantity)
            for k, name in enumerate(HEAD_STATS):
                where = f"{family} {kind} {name} {cap.tokens}"
                np.testing.assert_allclose(
                    device[..., k], host[name], rtol=1e-5, atol=1e-6, err_msg=where
                )
        if family == "bert":  # and the authors' formulas (General_Analysis.ipynb), on the device
            attns = np.asarray(cap.attention, np.float64)
            ref = avg_attns(list(cap.tokens), attns)
            ref["entropy"], ref["entropy_cls"], _ = entropies(attns)
            for name in ("sep_sep", "rest_sep", "entropy", "entropy_cls", "prev", "next"):
                got = cap.head_stats[..., HEAD_STATS.index(name)]
                np.testing.assert_allclose(got, ref[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_a_corpus_analysis_from_the_statistics_alone_matches_the_maps(engines):
    engine = engines["bert"]
    from_maps, from_stats = CorpusAnalysis(), CorpusAnalysis(head_stats_only=True)
    for cap in engine.capture(TEXTS, what=MAPS):
        from_maps.update(cap)
    for cap in engine.capture(TEXTS, what=STATS, dtype="float16"):
        assert set(cap.tensors) == set(STATS)  # no map reached the host
        from_stats.update(cap)
    want, got = from_maps.head_stats.result(), from_stats.head_stats.result()
    assert set(got) == set(want)
    for name in want:  # float16 on the wire: relative 2^-11
        np.testing.assert_allclose(got[name], want[name], rtol=2e-3, atol=1e-4, err_msg=name)


def test_analyze_stats_only(checkpoint_dirs, tmp_path, capsys):
    text = tmp_path / "in.txt"
    text.write_text(f"{EXAMPLE_A}\n{EXAMPLE_A} ||| {EXAMPLE_B}\n", encoding="utf-8")
    model = str(checkpoint_dirs["bert"])
    full, fast = tmp_path / "full.json", tmp_path / "fast.json"
    args = ["analyze", str(text), "--model", model, "--quiet", "--no-head-distance"]
    assert main([*args, "--out", str(full)]) == 0
    assert main([*args, "--out", str(fast), "--stats-only"]) == 0
    a, b = json.loads(full.read_text()), json.loads(fast.read_text())
    assert b["meta"]["what"] == list(STATS) and b["patterns"] == {}
    assert set(b["head_stats"]) == set(a["head_stats"])
    for name, value in a["head_stats"].items():
        np.testing.assert_allclose(b["head_stats"][name], value, rtol=1e-5, atol=1e-6)
    assert {"sep_sep", "rest_sep", "norm_sep_sep"} <= set(b["head_stats"])
    assert b["meta"]["uniform_entropy"] == a["meta"]["uniform_entropy"] > 0
    conllu = tmp_path / "x.conllu"
    conllu.write_text("1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n", encoding="utf-8")
    capsys.readouterr()
    assert main([*args, "--out", str(fast), "--stats-only", "--conllu", str(conllu)]) == 2
    assert "--stats-only" in capsys.readouterr().err


def test_statistics_are_not_offered_as_uint8_and_need_maps_for_custom_specials(engines):
    engine = engines["bert"]
    with pytest.raises(ValueError, match="head_stats cannot be uint8"):
        engine.capture([EXAMPLE_A], what=STATS[:1], dtype="uint8")
    from jaxattn.analysis import BERT_SPECIALS, HeadStats

    (cap,) = engine.capture([EXAMPLE_A], what=STATS[:1])
    with pytest.raises(UsageError, match="custom specials need the maps"):
        HeadStats(specials=BERT_SPECIALS).update(cap)
