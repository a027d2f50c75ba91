"""The decoder analyses on hand-made causal patterns whose answers are known.

Attention sinks, previous-token, duplicate-token and induction scores, and the
numpy reference of `decoder_head_stats` (`jaxattn.analysis.decoder`); the engine's
on-device statistics against it: tests/families/test_gpt2_decoder_stats.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from jaxattn.analysis import (
    AttentionSinks,
    DecoderHeads,
    decoder_head_statistics,
    duplicate_token_scores,
    first_token_scores,
    induction_scores,
    previous_token_scores,
)
from jaxattn.capture import Capture
from jaxattn.quantities import DECODER_HEAD_STATS, ENTROPY_SMOOTHING


def _causal(rows):
    """[T, T] from a list of per-row weight lists (row i has i + 1 entries), zeros beyond."""
    t = len(rows)
    w = np.zeros((t, t))
    for i, r in enumerate(rows):
        assert len(r) == i + 1
        w[i, : i + 1] = r
    np.testing.assert_allclose(w.sum(-1), 1.0)
    return w


def _onehot(t, target):
    """[T, T]: row i puts all its weight on key target(i)."""
    w = np.zeros((t, t))
    for i in range(t):
        w[i, target(i)] = 1.0
    return w


def _cap(attention, tokens):
    return Capture(
        tokens=tuple(tokens),
        sentence_b_start=None,
        layers=tuple(range(attention.shape[0])),
        heads=tuple(range(attention.shape[1])),
        dtype="float32",
        tensors={"attention": attention.astype(np.float32)},
    )


def test_the_canonical_heads_score_one_on_their_own_pattern():
    n = 5
    seq = ["a", "b", "c", "d", "e"]
    tokens = ["<s>", *seq, *seq]  # BOS, then the repeated random sequence
    t = len(tokens)
    sink = _onehot(t, lambda i: 0)
    prev = _onehot(t, lambda i: max(i - 1, 0))
    # induction: row n+1+k (the second r_k) -> 1+k+1 (after its first occurrence)
    ind = _onehot(t, lambda i: i - n + 1 if i > n else 0)
    dup = _onehot(t, lambda i: i - n if i > n else 0)
    w = np.stack([sink, prev, ind, dup])[None]  # [1, 4, T, T]
    # row 1 of the previous-token head looks at token 0 too
    np.testing.assert_allclose(first_token_scores(w), [[1, 1 / 10, 5 / 10, 5 / 10]])
    np.testing.assert_allclose(previous_token_scores(w), [[0.1, 1, 0.1, 0.1]])
    # only the second half has an earlier occurrence: rows 6..10
    np.testing.assert_allclose(induction_scores(w, tokens), [[0, 0, 1, 0]])
    np.testing.assert_allclose(duplicate_token_scores(w, tokens), [[0, 0, 0, 1]])
    stats = decoder_head_statistics(w, tokens)
    np.testing.assert_allclose(stats["first"], [[1, 0.1, 0.5, 0.5]])
    np.testing.assert_allclose(stats["prev"], [[0.1, 1, 0.1, 0.1]])
    # ids work as well as strings
    ids = [0, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5]
    np.testing.assert_allclose(induction_scores(w, ids), [[0, 0, 1, 0]])


def test_the_statistics_of_a_hand_made_map():
    w = _causal(
        [
            [1.0],
            [0.5, 0.5],
            [0.25, 0.25, 0.5],
            [0.1, 0.2, 0.3, 0.4],
        ]
    )
    tokens = ["Hello", ",", "Ġworld", "."]
    stats = decoder_head_statistics(w[None, None], tokens)
    assert list(stats) == list(DECODER_HEAD_STATS)
    assert stats["first"][0, 0] == pytest.approx((0.5 + 0.25 + 0.1) / 3)
    assert stats["prev"][0, 0] == pytest.approx((0.5 + 0.25 + 0.3) / 3)
    assert stats["self"][0, 0] == pytest.approx((0.5 + 0.5 + 0.4) / 3)
    assert stats["punct"][0, 0] == pytest.approx((0.5 + 0.25 + (0.2 + 0.4)) / 3)
    s = ENTROPY_SMOOTHING

    def h(row):
        p = (1 - s) * np.asarray(row) + s / len(row)
        return -(p * np.log(p)).sum()

    want = (h([0.5, 0.5]) + h([0.25, 0.25, 0.5]) + h([0.1, 0.2, 0.3, 0.4])) / 3
    assert stats["entropy"][0, 0] == pytest.approx(want)
    one = decoder_head_statistics(np.ones((1, 1, 1, 1)), ["a"])
    assert all(np.isnan(v).all() for v in one.values())  # row 0 alone: undefined


def test_no_repeats_gives_nan_and_bad_shapes_are_named():
    w = _onehot(3, lambda i: 0)[None, None]
    assert np.isnan(induction_scores(w, ["a", "b", "c"])).all()
    assert np.isnan(duplicate_token_scores(w, ["a", "b", "c"])).all()
    with pytest.raises(ValueError, match="2 tokens for attention over 3 positions"):
        induction_scores(w, ["a", "b"])
    with pytest.raises(ValueError, match=r"must be \[..., T, T\]"):
        previous_token_scores(np.ones((2, 3)))


def test_sinks_with_and_without_bos():
    t = 4
    with_bos = np.stack([_onehot(t, lambda i: 0), _onehot(t, lambda i: i)])[None]
    without = np.stack([_onehot(t, lambda i: max(i - 1, 0)), _onehot(t, lambda i: i)])[None]
    sinks = AttentionSinks(_cap(with_bos, "abcd"), _cap(without, "bcde"))
    np.testing.assert_allclose(sinks.first, [[1, 0]])
    np.testing.assert_allclose(sinks.other, [[1 / 3, 0]])
    np.testing.assert_allclose(sinks.difference, [[2 / 3, 0]])
    alone = AttentionSinks(_cap(with_bos, "abcd"))
    assert alone.other is None and alone.difference is None
    with pytest.raises(ValueError, match="different layers/heads"):
        AttentionSinks(_cap(with_bos, "abcd"), _cap(with_bos[:, :1], "abcd"))


def test_decoder_heads_streams_the_mean_over_examples():
    tokens = ["x", "a", "b", "c", "a", "b"]
    ind = _onehot(6, lambda i: {4: 2, 5: 3}.get(i, 0))[None, None]
    prev = _onehot(6, lambda i: max(i - 1, 0))[None, None]
    heads = DecoderHeads()
    heads.update(_cap(ind, tokens))
    heads.update(_cap(prev, tokens))
    heads.update(_cap(prev[..., :1, :1], ["x"]))  # one token: every score NaN, left out
    out = heads.result()
    assert heads.examples == 3
    assert list(out) == [*DECODER_HEAD_STATS, "induction", "duplicate"]
    # rows 4, 5 have earlier occurrences (a at 1, b at 2): induction head 1, prev head 0
    np.testing.assert_allclose(out["induction"], [[0.5]])
    np.testing.assert_allclose(out["prev"], [[(1 / 5 + 1.0) / 2]])  # ind's row 1 -> 0
