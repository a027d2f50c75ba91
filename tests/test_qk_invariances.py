"""The joint query-key map's maths (jaxattn.engine.qk_map) against numpy written here.

The layout rests on two invariances of the attention softmax (translating every
key by one vector; scaling queries by c and keys by 1/c); the normalisation the
map applies must be exactly such a transform, its streamed moments must equal
one-shot statistics, and its PCA must be numpy's SVD of the same joint cloud.
"""

from __future__ import annotations

import numpy as np
import pytest

from jaxattn.engine.qk_map import MomentStream, fit_map, normalise, normalised_cloud, project
from jaxattn.errors import InputError

L, H, K = 2, 3, 5  # odd sizes
LENGTHS = (7, 1, 13, 4, 9)  # examples of different lengths, one of a single token


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _examples(seed: int = 0):
    rng = np.random.default_rng(seed)
    out = []
    for t in LENGTHS:  # keys off-centre and on another scale than queries
        q = rng.normal(size=(L, H, t, K)) * 0.7 + rng.normal(size=(L, H, 1, K))
        k = rng.normal(size=(L, H, t, K)) * 3.0 + 5.0
        out.append((q.astype(np.float32), k.astype(np.float32)))
    return out


def _fitted(examples, batch_tokens: int = 8):
    stream = MomentStream(batch_tokens=batch_tokens)  # small batches: several flushes
    for q, k in examples:
        stream.add(q, k)
    return stream.moments(), fit_map(stream.moments())


def test_translating_keys_and_scaling_q_by_c_k_by_1_over_c_keep_the_softmax():
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(6, K)), rng.normal(size=(9, K))
    v, c = rng.normal(size=K), 2.7
    want = softmax(q @ k.T)
    np.testing.assert_allclose(softmax(q @ (k + v).T), want, rtol=1e-12)
    np.testing.assert_allclose(softmax((c * q) @ (k / c).T), want, rtol=1e-12)


def test_the_normalisation_is_such_a_transform_and_equalises_centroids_and_rms():
    examples = _examples()
    _, maps = _fitted(examples)
    q = np.concatenate([e[0] for e in examples], 2).astype(np.float64)
    k = np.concatenate([e[1] for e in examples], 2).astype(np.float64)
    for g in range(L * H):
        qh, kh = q[g // H, g % H], k[g // H, g % H]
        nq, nk = normalise(qh, kh, maps.mean_q[g], maps.mean_k[g], maps.scale[g])
        np.testing.assert_allclose(softmax(nq @ nk.T), softmax(qh @ kh.T), rtol=1e-9, atol=1e-12)
        # the FINAL cloud: one centroid, equal RMS norms (the reference from the raw vectors)
        np.testing.assert_allclose(nq.mean(0), nk.mean(0), atol=1e-5)
        np.testing.assert_allclose(maps.centre[g], nq.mean(0), atol=1e-5)
        rms_q = np.sqrt((nq**2).sum(1).mean())
        rms_k = np.sqrt((nk**2).sum(1).mean())
        assert rms_q == pytest.approx(rms_k, rel=1e-5)
        # c from the moments: (tr Cov k / tr Cov q)^(1/4), numpy's own covariance
        c = (np.trace(np.cov(kh.T, bias=True)) / np.trace(np.cov(qh.T, bias=True))) ** 0.25
        assert maps.scale[g] == pytest.approx(c, rel=1e-5)
        # the transform is exactly q -> c q and k -> k / c + v (one vector v for all keys)
        np.testing.assert_allclose(nq, c * qh, rtol=1e-5)
        shift = nk - kh / c
        np.testing.assert_allclose(shift, np.broadcast_to(shift[0], shift.shape), atol=1e-5)


def test_streamed_moments_equal_the_one_shot_numpy_statistics():
    examples = _examples(2)
    m, _ = _fitted(examples, batch_tokens=6)  # an example of 13 tokens spans batches
    q = np.concatenate([e[0] for e in examples], 2).astype(np.float64).reshape(L * H, -1, K)
    k = np.concatenate([e[1] for e in examples], 2).astype(np.float64).reshape(L * H, -1, K)
    np.testing.assert_array_equal(m.count, sum(LENGTHS))
    np.testing.assert_allclose(m.sum_q, q.sum(1), rtol=1e-5)
    np.testing.assert_allclose(m.sum_k, k.sum(1), rtol=1e-5)
    np.testing.assert_allclose(m.sq_q, np.einsum("gnk,gnj->gkj", q, q), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(m.sq_k, np.einsum("gnk,gnj->gkj", k, k), rtol=1e-5, atol=1e-3)


def test_pca_equals_numpy_svd_of_the_joint_normalised_cloud_up_to_sign():
    examples = _examples(3)
    _, maps = _fitted(examples)
    q = np.concatenate([e[0] for e in examples], 2).astype(np.float64)
    k = np.concatenate([e[1] for e in examples], 2).astype(np.float64)
    xq, xk = project(maps, q, k, chunk=6)  # 34 tokens: 6 calls, the last one padded
    for g in range(L * H):
        qh, kh = q[g // H, g % H], k[g // H, g % H]
        # the reference: its own normalisation from the raw vectors, then SVD
        c = ((kh - kh.mean(0)) ** 2).sum(1).mean() / ((qh - qh.mean(0)) ** 2).sum(1).mean()
        c = c**0.25
        cloud = np.concatenate([c * qh, (kh - kh.mean(0)) / c + c * qh.mean(0)])
        np.testing.assert_allclose(normalised_cloud(maps, g, qh, kh), cloud, rtol=1e-5, atol=1e-5)
        centred = cloud - cloud.mean(0)
        _, s, vt = np.linalg.svd(centred, full_matrices=False)
        ref = centred @ vt[:2].T
        got = np.concatenate([xq[g // H, g % H], xk[g // H, g % H]])
        for d in range(2):
            sign = np.sign(ref[:, d] @ got[:, d])
            np.testing.assert_allclose(got[:, d], sign * ref[:, d], atol=1e-4 * s[0])
        np.testing.assert_allclose(maps.explained[g], s[:2] ** 2 / (s**2).sum(), rtol=1e-6)


def test_too_few_points_or_one_dimension_is_a_one_line_error():
    one = np.ones((1, 1, 1, 3), np.float32)
    with pytest.raises(InputError, match="at least 3 points") as e:
        _fitted([(one, one)])
    assert "\n" not in str(e.value)
    flat = np.ones((1, 1, 5, 1), np.float32)
    with pytest.raises(InputError, match="head size >= 2"):
        _fitted([(flat, flat)])
    with pytest.raises(InputError, match="no token"):
        MomentStream().moments()
