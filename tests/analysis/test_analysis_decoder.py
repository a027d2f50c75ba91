"""The decoder analyses on hand-made causal patterns whose answers are known.

Attention sinks, previous-token, duplicate-token and induction scores, and the
numpy reference of `decoder_head_stats` (`jaxattn.analysis.decoder`); the engine's
on-device statistics against it: tests/families/test_gpt2_decoder_stats.py.
"""

from __future__ import annotations

import math

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
    repeated_sequence_text,
)
from jaxattn.capture import Capture
from jaxattn.errors import UsageError
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


HAND_ROWS = [[1.0], [0.5, 0.5], [0.25, 0.25, 0.5], [0.1, 0.2, 0.3, 0.4]]


def test_the_statistics_of_a_hand_made_map():
    w = _causal(HAND_ROWS)
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
    with pytest.raises(UsageError, match="2 tokens for weights over 3 positions"):
        induction_scores(w, ["a", "b"])
    with pytest.raises(UsageError, match=r"must be \[..., T, T\]"):
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
    with pytest.raises(UsageError, match="different layers/heads"):
        AttentionSinks(_cap(with_bos, "abcd"), _cap(with_bos[:, :1], "abcd"))
    # from the on-device table alone: its "first" column, whichever column that is
    table = np.arange(2 * len(DECODER_HEAD_STATS), dtype=np.float32).reshape(1, 2, -1)
    cap = Capture(
        tokens=tuple("abcd"),
        sentence_b_start=None,
        layers=(0,),
        heads=(0, 1),
        dtype="float32",
        tensors={"decoder_head_stats": table},
    )
    np.testing.assert_allclose(
        AttentionSinks(cap).first, table[..., DECODER_HEAD_STATS.index("first")]
    )


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


def _random_causal(rng, shape, t):
    """[..., T, T] random causal rows (each a Dirichlet draw over the keys j <= i)."""
    w = rng.gamma(1.0, size=(*shape, t, t)) * np.tri(t)
    return w / w.sum(-1, keepdims=True)


@pytest.mark.parametrize("bos", [False, True])
def test_on_a_repeated_sequence_the_scores_are_transformerlens_stripes(bos):
    """TransformerLens's Main_Demo (no BOS) and ARENA (BOS first) score induction as the
    mean of the diagonal at offset 1 - n of [BOS?, r_1 .. r_n, r_1 .. r_n]; that diagonal
    also holds first-half rows (Main_Demo: r_n -> r_1; ARENA: r_{n-1} -> BOS, r_n -> r_1),
    which this score leaves out. The duplicate-token diagonal is at offset -n."""
    rng = np.random.default_rng(3)
    n = 7
    r = list(rng.permutation(50)[:n] + 1)  # distinct ids, 0 kept for BOS
    tokens = ([0] if bos else []) + r + r
    w = _random_causal(rng, (2, 3), len(tokens))
    first_half = 2 if bos else 1  # the stripe's rows before the second r_1
    stripe = np.diagonal(w, 1 - n, -2, -1)  # W[i, i - n + 1]
    assert stripe.shape[-1] == n + first_half
    np.testing.assert_allclose(induction_scores(w, tokens), stripe[..., first_half:].mean(-1))
    # the whole stripe's mean (the tutorials' number) differs: the first-half rows count there
    assert np.abs(stripe.mean(-1) - induction_scores(w, tokens)).max() > 1e-2
    dup = np.diagonal(w, -n, -2, -1)  # W[i, i - n]
    np.testing.assert_allclose(duplicate_token_scores(w, tokens), dup[..., int(bos) :].mean(-1))
    prev = np.diagonal(w, -1, -2, -1)  # ARENA's prev_attn_detector: diagonal(-1).mean()
    np.testing.assert_allclose(previous_token_scores(w), prev.mean(-1))


def _naive_scores(w, tokens):
    """Induction and duplicate scores by the definitions, one row at a time: row i's weight
    on the keys j + 1 (j + 1 < i) after earlier occurrences j of token i, and on those
    occurrences j < i, each averaged over the rows that have such keys."""
    ind, dup = [], []
    for i, tok in enumerate(tokens):
        earlier = [j for j in range(i) if tokens[j] == tok]
        after = [j + 1 for j in earlier if j + 1 < i]
        if after:
            ind.append(w[..., i, after].sum(-1))
        if earlier:
            dup.append(w[..., i, earlier].sum(-1))
    return np.mean(ind, 0), np.mean(dup, 0)


def test_repeats_anywhere_match_the_definition_row_by_row():
    rng = np.random.default_rng(4)
    tokens = list(rng.integers(0, 4, size=17))  # 4 token kinds: many repeats, some adjacent
    w = _random_causal(rng, (2, 2), len(tokens))
    want_ind, want_dup = _naive_scores(w, tokens)
    np.testing.assert_allclose(induction_scores(w, tokens), want_ind)
    np.testing.assert_allclose(duplicate_token_scores(w, tokens), want_dup)


def test_several_earlier_occurrences_and_an_adjacent_repeat_by_hand():
    # a b a a: row 2 (a) -> b (after the a at 0); row 3 (a) -> b, and not itself (after
    # the a at 2 comes row 3 itself: attending to oneself is no prefix matching)
    w = _causal(HAND_ROWS)[None, None]
    tokens = ["a", "b", "a", "a"]
    np.testing.assert_allclose(induction_scores(w, tokens), [[(0.25 + 0.2) / 2]])
    # duplicate: row 2 -> a at 0; row 3 -> a at 0 and at 2, summed
    np.testing.assert_allclose(duplicate_token_scores(w, tokens), [[(0.25 + (0.1 + 0.3)) / 2]])


def test_the_repeated_sequence_is_n_distinct_word_tokens_twice():
    from gpt2_fixture import make_gpt2_tokenizer

    tok = make_gpt2_tokenizer()
    text, tokens = repeated_sequence_text(tok, 6, seed=1)
    first, second = tokens[:6], tokens[6:]
    assert first == second and len(set(first)) == 6 and len(tokens) == 12
    assert all(t.startswith("Ġ") for t in first)
    vocab = tok.get_vocab()
    assert tok.encode(text, add_special_tokens=False) == [vocab[t] for t in tokens]  # no BOS
    assert repeated_sequence_text(tok, 6, seed=1) == (text, tokens)  # the seed fixes it
    with pytest.raises(UsageError, match="n >= 2"):
        repeated_sequence_text(tok, 1)
    with pytest.raises(UsageError, match="fewer than the n = 10000"):
        repeated_sequence_text(tok, 10000)


def test_a_row_sums_its_weight_over_several_earlier_copies():
    """A sequence repeated three times (Olsson et al. repeat theirs four times): a head that
    splits each row's weight evenly over the successors of all earlier copies scores 1
    here (the row's sum, averaged over rows); Olsson et al.'s mean over attention entries
    would give (n * 1 + 2n * 1/2) / 3n = 2/3 (ANALYSIS.md says so)."""
    n = 4
    tokens = list("abcd") * 3
    t = len(tokens)
    w = np.zeros((t, t))
    entries = []
    for i in range(t):
        after = [j + 1 for j in range(i) if tokens[j] == tokens[i] and j + 1 < i]
        if after:
            w[i, after] = 1.0 / len(after)
            entries += [1.0 / len(after)] * len(after)
        else:
            w[i, 0] = 1.0
    assert len(entries) == 3 * n
    np.testing.assert_allclose(induction_scores(w[None, None], tokens), [[1.0]])
    assert np.mean(entries) == pytest.approx(2 / 3)


def test_an_encoders_rows_are_smoothed_over_every_key():
    # An encoder's (causal=False) uniform rows over 3 keys: each row's entropy is ln 3
    # (smoothing keeps a uniform row uniform); read causally, rows 1 and 2 would see
    # only 2 and 3 of their keys, one third of the weight missing from row 1.
    w = np.full((1, 1, 3, 3), 1 / 3)
    tokens = ["[CLS]", "a", "[SEP]"]
    got = decoder_head_statistics(w, tokens, causal=False)
    assert got["entropy"][0, 0] == pytest.approx(math.log(3), rel=1e-12)
    assert got["first"][0, 0] == got["prev"][0, 0] == got["self"][0, 0] == pytest.approx(1 / 3)
    causal = decoder_head_statistics(w, tokens)["entropy"][0, 0]
    assert causal < math.log(3) - 0.1


def test_decoder_heads_reads_an_encoders_maps_as_its_tables():
    """An encoder's capture (provenance causal False): its maps' entropy is the whole
    row's, as its on-device decoder_head_stats' (it summed keys j <= i of the maps: a
    tiny BERT's maps and tables differed by up to 0.97 nats); a capture that does not
    say is read as a decoder's."""
    import dataclasses

    w = np.full((1, 1, 3, 3), 1 / 3)
    tokens = ["[CLS]", "a", "[SEP]"]
    encoder = dataclasses.replace(
        _cap(w, tokens),
        tensors={"attention": w.astype(np.float32), "alpha_fx_norm": 2 * w.astype(np.float32)},
        provenance={"causal": False},
    )
    heads = DecoderHeads()
    heads.update(encoder)
    out = heads.result()
    for name in ("entropy", "norm_entropy"):  # uniform rows over 3 keys: ln 3
        assert out[name][0, 0] == pytest.approx(math.log(3), rel=1e-6), name
    unsaid = DecoderHeads()
    unsaid.update(_cap(w, tokens))
    assert unsaid.result()["entropy"][0, 0] < math.log(3) - 0.1  # read causally
