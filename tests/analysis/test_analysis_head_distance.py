"""Jensen-Shannon divergence between heads and classical MDS (Clark et al. 2019, section 6)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from analysis_helpers import make_capture, one_hot, uniform

from jaxattn.analysis import HeadDistance, classical_mds, js_divergence_sum
from jaxattn.errors import UsageError


def js_reference(p, q):
    m = 0.5 * (p + q)

    def kl(a, b):
        nz = a > 0
        return float((a[nz] * np.log(a[nz] / b[nz])).sum())

    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def test_hand_values():
    t = 6
    heads = np.stack([uniform(t), uniform(t), one_hot(0, t), one_hot(1, t)])
    d = js_divergence_sum(heads, smoothing=0.0) / t
    assert d[0, 1] == 0.0
    assert d[2, 3] == pytest.approx(math.log(2))
    assert np.allclose(np.diag(d), 0.0) and np.allclose(d, d.T)
    # uniform vs one-hot: M = (1/t + 1)/2 on one key, 1/(2t) on the others
    m = np.full(t, 1 / (2 * t))
    m[0] += 0.5
    expected = -(m * np.log(m)).sum() - 0.5 * math.log(t)
    assert d[0, 2] == pytest.approx(expected)


def test_random_against_reference():
    # the released code's smoothing (0.999 w + 0.001 / T), then the plain JS divergence
    rng = np.random.default_rng(1)
    w = rng.random((2, 3, 5, 5)) ** 4
    w /= w.sum(-1, keepdims=True)
    flat = 0.999 * w.reshape(6, 5, 5) + 0.001 / 5
    got = js_divergence_sum(w)
    for a in range(6):
        for b in range(6):
            ref = sum(js_reference(flat[a, i], flat[b, i]) for i in range(5))
            assert got[a, b] == pytest.approx(ref, abs=1e-12)


def test_random_against_reference_unsmoothed():
    rng = np.random.default_rng(1)
    w = rng.random((2, 3, 5, 5)) ** 4
    w /= w.sum(-1, keepdims=True)
    flat = w.reshape(6, 5, 5)
    got = js_divergence_sum(w, smoothing=0.0)
    for a in range(6):
        for b in range(6):
            ref = sum(js_reference(flat[a, i], flat[b, i]) for i in range(5))
            assert got[a, b] == pytest.approx(ref, abs=1e-12)


def test_rows_are_smoothed_as_clark_et_al_released_code():
    # clarkkev/attention-analysis head_distances.py smooths every row to
    # 0.999 w + 0.001 / T before the divergence (T = the row's length).
    # Two one-hot heads over T = 2 keys: P = (0.9995, 0.0005), Q = (0.0005, 0.9995),
    # M = (1/2, 1/2), JS = KL(P || M) = 0.9995 ln(1.999) + 0.0005 ln(0.001), per row.
    heads = np.stack([one_hot(0, 2), one_hot(1, 2)])  # [2 heads, 2 rows, 2 keys]
    per_row = 0.9995 * math.log(1.999) + 0.0005 * math.log(0.001)
    got = js_divergence_sum(heads)
    assert got[0, 1] == pytest.approx(2 * per_row, rel=1e-12)
    assert got[0, 1] < 2 * math.log(2)  # the unsmoothed value


def test_mds_recovers_planar_points():
    pts = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 4.0], [1.0, 1.0], [-2.0, 1.5]])
    dist = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
    emb = classical_mds(dist)
    np.testing.assert_allclose(np.linalg.norm(emb[:, None] - emb[None], axis=-1), dist, atol=1e-9)
    np.testing.assert_array_equal(emb, classical_mds(dist))


def test_accumulator_token_mean_and_skip():
    t = 6
    cap = make_capture(
        np.stack([one_hot(0, t), one_hot(1, t)])[None],
        tokens=["[CLS]", "a", "b", "c", "d", "[SEP]"],
        sentence_b_start=None,
    )
    acc = HeadDistance(max_tokens=10)
    acc.update(cap)
    acc.update(cap)
    long = make_capture(
        np.stack([uniform(12), uniform(12)])[None], tokens=["w"] * 12, sentence_b_start=None
    )
    acc.update(long)
    out = acc.result()
    assert acc.skipped == 1 and acc.tokens == 12
    # one-hot on key 0 vs key 1 of T = 6, smoothed: a = 0.999 + 0.001/6 and b = 0.001/6 on
    # the two keys (swapped for the other head), equal elsewhere; M = (a + b)/2 on both
    a, b = 0.999 + 0.001 / 6, 0.001 / 6
    m = (a + b) / 2
    per_row = a * math.log(a / m) + b * math.log(b / m)
    assert out["divergence"][0, 1] == pytest.approx(per_row)
    assert out["distance"][0, 1] == pytest.approx(math.sqrt(per_row))
    unsmoothed = HeadDistance(max_tokens=10, smoothing=0.0)
    unsmoothed.update(cap)
    assert unsmoothed.result()["divergence"][0, 1] == pytest.approx(math.log(2))
    assert out["mds"].shape == (1, 2, 2)


def test_mds_of_fewer_points_than_dims():
    np.testing.assert_array_equal(classical_mds(np.zeros((1, 1))), [[0.0, 0.0]])


@pytest.mark.parametrize("bad", [-0.1, 1.0, 2, float("nan"), "0.001", True])
def test_a_smoothing_outside_zero_to_one_is_refused_by_name(bad):
    from jaxattn.errors import UsageError

    with pytest.raises(UsageError, match="smoothing must be"):
        HeadDistance(smoothing=bad)
    with pytest.raises(UsageError, match="smoothing must be"):
        js_divergence_sum(np.full((1, 2, 2, 2), 0.5), smoothing=bad)


def test_a_causal_corpus_leaves_each_row_0_out():
    # Two causal heads over 3 tokens: row 0 is (1, 0, 0) in both (JS 0 whatever the model);
    # rows 1 and 2 differ. The mean is over rows 1 .. n-1 only, with Clark et al.'s
    # smoothing over all T keys (the future keys get s / T in both rows alike).
    a = np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    b = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.5, 0.5, 0.0]])
    w = np.stack([a, b])[None]  # [1 layer, 2 heads, 3, 3]
    p = 0.999 * w[0] + 0.001 / 3
    per_row = [js_reference(p[0, i], p[1, i]) for i in range(3)]
    assert per_row[0] == pytest.approx(0.0, abs=1e-15)
    tokens = ("<s>", "x", "y")
    causal, every_row = HeadDistance(causal=True), HeadDistance()
    for d in (causal, every_row):
        d.update(make_capture(w, tokens=tokens, sentence_b_start=None))
    assert causal.tokens == 2 and every_row.tokens == 3
    got = causal.result()["divergence"][0, 1]
    assert got == pytest.approx((per_row[1] + per_row[2]) / 2, rel=1e-9)
    assert every_row.result()["divergence"][0, 1] == pytest.approx(sum(per_row) / 3, rel=1e-9)


def test_a_causal_corpus_of_one_token_examples_has_no_distance():
    d = HeadDistance(causal=True)
    d.update(make_capture(np.ones((1, 2, 1, 1)), tokens=("<s>",), sentence_b_start=None))
    with pytest.raises(UsageError, match="no example with a query row past its first"):
        d.result()


def test_a_decoder_corpus_analysis_compares_heads_causally():
    from jaxattn.analysis import CorpusAnalysis

    assert CorpusAnalysis(decoder=True).distance.causal
    assert not CorpusAnalysis().distance.causal


def test_a_capture_that_says_it_is_causal_is_compared_causally_by_default():
    """HeadDistance() (causal None) reads each capture's provenance, as MixingRatios."""
    import dataclasses

    w = np.stack([np.eye(3), np.tril(np.ones((3, 3))) / np.arange(1, 4)[:, None]])[None]
    cap = make_capture(w, tokens=("<s>", "x", "y"), sentence_b_start=None)
    for says, rows in ((True, 2), (False, 3), (None, 3)):
        d = HeadDistance()
        d.update(cap if says is None else dataclasses.replace(cap, provenance={"causal": says}))
        assert d.tokens == rows, says
