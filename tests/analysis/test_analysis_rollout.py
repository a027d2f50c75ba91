"""Attention rollout (Abnar & Zuidema 2020) on hand-computable examples and the authors' recursion.

`authors_rollout` is written here from samiraabnar/attention_flow
(compute_corel_distilbert_sst.py get_joint_relevance, attention_graph_util.py
compute_joint_attention with add_residual=True): heads summed and divided by H,
the identity added, rows divided by their sums, then the running product with
the current layer on the left.
"""

from __future__ import annotations

import numpy as np
import pytest
from analysis_helpers import make_capture

from jaxattn.analysis import RolloutStats, attention_rollout, rollout
from jaxattn.analysis.rollout import residual_attention
from jaxattn.capture import Capture
from jaxattn.errors import UsageError

TO_1 = [[0.0, 1.0], [0.0, 1.0]]  # every row on token 1
TO_0 = [[1.0, 0.0], [1.0, 0.0]]


def authors_rollout(weights: np.ndarray) -> np.ndarray:
    w = np.asarray(weights, np.float64)
    aug = w.sum(1) / w.shape[1] + np.eye(w.shape[-1])
    aug /= aug.sum(-1, keepdims=True)
    joint = [aug[0]]
    for layer in aug[1:]:
        joint.append(layer @ joint[-1])
    return np.stack(joint)


def test_three_tokens_by_hand():
    first = [[1.0, 0.0, 0.0]] * 3  # every row on token 0
    previous = [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    following = [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]
    w = np.array([[first, first], [previous, following]])  # [L=2, H=2, 3, 3]
    a0 = [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.5, 0.0, 0.5]]
    a1 = [[0.75, 0.25, 0.0], [0.25, 0.5, 0.25], [0.0, 0.25, 0.75]]
    np.testing.assert_allclose(residual_attention(w), [a0, a1])
    r = attention_rollout(w)
    np.testing.assert_allclose(r[0], a0)
    np.testing.assert_allclose(
        r[1], [[0.875, 0.125, 0.0], [0.625, 0.25, 0.125], [0.5, 0.125, 0.375]]
    )
    np.testing.assert_allclose(r, authors_rollout(w))


def test_the_authors_recursion_on_random_maps():
    rng = np.random.default_rng(1)
    for t, layers, heads in ((4, 3, 2), (4, 6, 12), (9, 4, 3)):
        w = rng.dirichlet(np.full(t, 0.5), size=(layers, heads, t))
        np.testing.assert_allclose(attention_rollout(w), authors_rollout(w), rtol=1e-12)


def test_two_layers_one_head():
    r = attention_rollout(np.array([[TO_1], [TO_0]]))
    # A'_0 = [[.5, .5], [0, 1]], A'_1 = [[1, 0], [.5, .5]]
    np.testing.assert_allclose(r[0], [[0.5, 0.5], [0.0, 1.0]])
    np.testing.assert_allclose(r[1], [[0.5, 0.5], [0.25, 0.75]])


def test_heads_are_averaged():
    r = attention_rollout(np.array([[TO_0, TO_1], [TO_0, TO_1]]))
    a = np.array([[0.75, 0.25], [0.25, 0.75]])
    np.testing.assert_allclose(r[0], a)
    np.testing.assert_allclose(r[1], a @ a)


def test_identity_and_row_sums():
    np.testing.assert_allclose(
        attention_rollout(np.broadcast_to(np.eye(5), (3, 2, 5, 5)))[-1], np.eye(5)
    )
    rng = np.random.default_rng(0)
    w = rng.random((4, 3, 7, 7))
    w /= w.sum(-1, keepdims=True)
    np.testing.assert_allclose(attention_rollout(w).sum(-1), 1.0)


def test_norm_based_rollout_normalises_rows_first():
    norms = np.array([[[[2.0, 2.0], [0.0, 4.0]]], [[[3.0, 0.0], [1.0, 0.0]]]])  # [L=2, H=1, 2, 2]
    cap = make_capture(
        np.array([[TO_1], [TO_0]]),
        tokens=["[CLS]", "[SEP]"],
        sentence_b_start=None,
        alpha_fx_norm=norms,
    )
    # normalised: layer 0 [[.5, .5], [0, 1]], layer 1 [[1, 0], [1, 0]]
    r = rollout(cap, kind="norm")
    a0 = np.array([[0.75, 0.25], [0.0, 1.0]])
    a1 = np.array([[1.0, 0.0], [0.5, 0.5]])
    np.testing.assert_allclose(r[1], a1 @ a0)
    np.testing.assert_allclose(rollout(cap)[1], [[0.5, 0.5], [0.25, 0.75]])


def test_rollout_needs_layers_from_zero():
    att = np.array([[TO_1], [TO_0]], np.float32)
    cap = Capture(
        tokens=("[CLS]", "[SEP]"),
        sentence_b_start=None,
        layers=(1, 2),
        heads=(0,),
        dtype="float32",
        tensors={"attention": att},
    )
    with pytest.raises(UsageError, match="consecutive layers from 0"):
        rollout(cap)


def test_rollout_stats():
    acc = RolloutStats()
    acc.update(
        make_capture(np.array([[TO_1], [TO_0]]), tokens=["[CLS]", "[SEP]"], sentence_b_start=None)
    )
    out = acc.result()
    assert list(out) == ["attention"]
    np.testing.assert_allclose(out["attention"]["self"], [0.75, 0.625])
    np.testing.assert_allclose(out["attention"]["cls"], [0.25, 0.375])
    np.testing.assert_allclose(out["attention"]["sep"], [0.75, 0.625])
