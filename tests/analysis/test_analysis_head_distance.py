"""Jensen-Shannon divergence between heads and classical MDS (Clark et al. 2019, section 6)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from analysis_helpers import make_capture, one_hot, uniform

from jaxattn.analysis import HeadDistance, classical_mds, js_divergence_sum


def js_reference(p, q):
    m = 0.5 * (p + q)

    def kl(a, b):
        nz = a > 0
        return float((a[nz] * np.log(a[nz] / b[nz])).sum())

    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def test_hand_values():
    t = 6
    heads = np.stack([uniform(t), uniform(t), one_hot(0, t), one_hot(1, t)])
    d = js_divergence_sum(heads) / t
    assert d[0, 1] == 0.0
    assert d[2, 3] == pytest.approx(math.log(2))
    assert np.allclose(np.diag(d), 0.0) and np.allclose(d, d.T)
    # uniform vs one-hot: M = (1/t + 1)/2 on one key, 1/(2t) on the others
    m = np.full(t, 1 / (2 * t))
    m[0] += 0.5
    expected = -(m * np.log(m)).sum() - 0.5 * math.log(t)
    assert d[0, 2] == pytest.approx(expected)


def test_random_against_reference():
    rng = np.random.default_rng(1)
    w = rng.random((2, 3, 5, 5)) ** 4
    w /= w.sum(-1, keepdims=True)
    flat = w.reshape(6, 5, 5)
    got = js_divergence_sum(w)
    for a in range(6):
        for b in range(6):
            ref = sum(js_reference(flat[a, i], flat[b, i]) for i in range(5))
            assert got[a, b] == pytest.approx(ref, abs=1e-12)


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
    assert out["divergence"][0, 1] == pytest.approx(math.log(2))
    assert out["distance"][0, 1] == pytest.approx(math.sqrt(math.log(2)))
    assert out["mds"].shape == (1, 2, 2)


def test_mds_of_fewer_points_than_dims():
    np.testing.assert_array_equal(classical_mds(np.zeros((1, 1))), [[0.0, 0.0]])
