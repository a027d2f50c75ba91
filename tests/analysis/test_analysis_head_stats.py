"""Head statistics (Clark et al. 2019) on hand-computable maps."""

from __future__ import annotations

import math

import numpy as np
import pytest
from analysis_helpers import (
    PAIR_TOKENS,
    T,
    identity,
    make_capture,
    next_token,
    one_hot,
    uniform,
)

from jaxattn.analysis import (
    ROBERTA_SPECIALS,
    HeadStats,
    SpecialTokens,
    head_statistics,
    row_entropy,
)
from jaxattn.errors import CaptureFileError, UsageError

SEP_A = PAIR_TOKENS.index("[SEP]")  # 7; the other [SEP] is the last token
S = 1e-4  # Clark et al.'s smoothing: entropy of (1 - S) w + S / T


def smoothed_entropy(t: int, *weights: tuple[float, int]) -> float:
    """Hand formula: entropy of a row of t keys holding `count` keys of weight w for each
    (w, count) given (the rest 0), smoothed as Clark et al. do."""
    rest = t - sum(c for _, c in weights)
    terms = [((1 - S) * w + S / t, c) for w, c in weights] + [(S / t, rest)]
    return -sum(c * p * math.log(p) for p, c in terms if c)


ONE_HOT = smoothed_entropy(T, (1.0, 1))  # about 0.0013 nats, not 0


def stats_of(m, tokens=PAIR_TOKENS, specials=None):
    out = head_statistics(np.asarray(m)[None, None], tokens, specials)
    return {k: float(v[0, 0]) for k, v in out.items()}


def test_uniform():
    s = stats_of(uniform())
    assert s["cls"] == pytest.approx(1 / T)
    assert s["sep"] == pytest.approx(2 / T)
    assert s["punct"] == pytest.approx(3 / T)  # ".", ",", "."
    assert s["self"] == pytest.approx(1 / T)
    assert s["prev"] == pytest.approx((T - 1) / T**2)
    assert s["next"] == pytest.approx((T - 1) / T**2)
    assert s["entropy"] == pytest.approx(math.log(T))  # smoothing keeps a uniform row
    assert s["entropy_cls"] == pytest.approx(math.log(T))
    assert s["sep_sep"] == pytest.approx(2 / T) and s["rest_sep"] == pytest.approx(2 / T)


def test_identity():
    s = stats_of(identity())
    assert s == pytest.approx(
        {
            "cls": 1 / T,
            "sep": 2 / T,
            "punct": 3 / T,
            "self": 1.0,
            "prev": 0.0,
            "next": 0.0,
            "entropy": ONE_HOT,
            "entropy_cls": ONE_HOT,
            "sep_sep": 1.0,  # each [SEP] row on itself
            "rest_sep": 0.0,
        }
    )
    assert 0.001 < ONE_HOT < 0.002


def test_next_token():
    s = stats_of(next_token())
    assert s["next"] == pytest.approx((T - 1) / T)
    assert s["self"] == pytest.approx(1 / T)  # the last row
    assert s["prev"] == 0.0
    assert s["cls"] == 0.0
    # rows 6 (".") and 17 (".") attend to the [SEP] after them; the last [SEP] to itself
    assert s["sep"] == pytest.approx(3 / T)
    # ", " (11) and "." (17) receive from rows 10 and 16; "." (6) from row 5
    assert s["punct"] == pytest.approx(3 / T)


def test_one_hot_on_sep():
    s = stats_of(one_hot(SEP_A))
    assert s["sep"] == 1.0 and s["cls"] == 0.0 and s["punct"] == 0.0
    assert s["self"] == pytest.approx(1 / T)  # row 7
    assert s["prev"] == pytest.approx(1 / T)  # row 8 -> 7
    assert s["next"] == pytest.approx(1 / T)  # row 6 -> 7
    assert s["entropy"] == pytest.approx(ONE_HOT) and s["entropy_cls"] == pytest.approx(ONE_HOT)
    assert s["sep_sep"] == 1.0  # the first [SEP] on itself, the second on the first
    assert s["rest_sep"] == 1.0


def test_roberta_specials_and_missing_cls():
    tokens = ("<s>", "I", "Ġwent", ".", "</s>")
    s = stats_of(uniform(5), tokens)  # detected from "<s>"
    assert s["cls"] == pytest.approx(0.2) and s["sep"] == pytest.approx(0.2)
    assert s["punct"] == pytest.approx(0.2)
    assert stats_of(uniform(5), tokens, ROBERTA_SPECIALS) == s
    custom = SpecialTokens(cls="<bos>", sep="</s>")
    assert math.isnan(stats_of(uniform(5), tokens, custom)["entropy_cls"])
    no_sep = stats_of(uniform(5), tokens, SpecialTokens(cls="<s>", sep="<sep>"))
    assert math.isnan(no_sep["sep_sep"]) and no_sep["rest_sep"] == 0.0


def test_sep_statistics_of_one_sentence():
    # [CLS] a . [SEP]: rows on [SEP] 0.1, 0.3, 0.5 and (the [SEP] row) 0.7
    m = np.array(
        [
            [0.6, 0.2, 0.1, 0.1],
            [0.2, 0.2, 0.3, 0.3],
            [0.1, 0.2, 0.2, 0.5],
            [0.1, 0.1, 0.1, 0.7],
        ]
    )
    s = stats_of(m, ("[CLS]", "a", ".", "[SEP]"))
    assert s["sep"] == pytest.approx((0.1 + 0.3 + 0.5 + 0.7) / 4)
    assert s["sep_sep"] == pytest.approx(0.7)  # one [SEP] row (Clark et al.'s code: / 2)
    assert s["rest_sep"] == pytest.approx((0.1 + 0.3 + 0.5) / 3)  # (theirs: / (4 - 2))


def test_smoothed_entropy_by_hand():
    row = np.array([0.5, 0.5, 0.0, 0.0])
    assert row_entropy(row, smoothing=S) == pytest.approx(smoothed_entropy(4, (0.5, 2)))
    p, q = 0.9999 * 0.5 + 0.0001 / 4, 0.0001 / 4
    assert row_entropy(row, smoothing=S) == pytest.approx(-2 * (p * math.log(p) + q * math.log(q)))
    assert row_entropy(row) == pytest.approx(math.log(2))  # unsmoothed: 0 ln 0 = 0


def test_row_entropy_zero_log_zero():
    assert row_entropy(np.array([0.5, 0.5, 0.0])) == pytest.approx(math.log(2))


def test_norm_weights_beside_attention():
    # Uniform attention, but f(x_j) is zero at both [SEP]s: norm-based weights
    # (Kobayashi et al. 2020) put nothing there, attention 2/T.
    fx = np.ones(T)
    fx[[SEP_A, T - 1]] = 0.0
    cap = make_capture(uniform(), alpha_fx_norm=(uniform() * fx)[None, None])
    acc = HeadStats()
    acc.update(cap)
    out = acc.result()
    assert out["sep"][0, 0] == pytest.approx(2 / T)
    assert out["norm_sep"][0, 0] == 0.0
    assert out["norm_cls"][0, 0] == pytest.approx(1 / (T - 2))
    assert out["norm_entropy"][0, 0] == pytest.approx(smoothed_entropy(T, (1 / (T - 2), T - 2)))


def test_corpus_mean_is_per_example_mean():
    acc = HeadStats(kinds=["attention"])
    acc.update(make_capture(identity()))
    short = ("[CLS]", "a", "[SEP]")
    acc.update(make_capture(uniform(3), tokens=short, sentence_b_start=None))
    out = acc.result()
    assert acc.examples == 2
    assert out["self"][0, 0] == pytest.approx((1.0 + 1 / 3) / 2)
    assert out["entropy"][0, 0] == pytest.approx((ONE_HOT + math.log(3)) / 2)
    assert acc.uniform_entropy == pytest.approx((math.log(T) + math.log(3)) / 2)
    assert "norm_self" not in out


def test_layout_mismatch_raises():
    acc = HeadStats()
    acc.update(make_capture(np.stack([identity(), identity()])[None]))
    with pytest.raises(UsageError, match="same layers and heads"):
        acc.update(make_capture(identity()))


def test_uint8_captures_are_decoded():
    from jaxattn.capture import Capture

    q = np.round(identity() * 255).astype(np.uint8)[None, None]
    cap = Capture(
        tokens=PAIR_TOKENS,
        sentence_b_start=8,
        layers=(0,),
        heads=(0,),
        dtype="uint8",
        tensors={"attention": q},
        quantization={"attention": (1 / 255, 0.0)},
    )
    acc = HeadStats()
    acc.update(cap)
    assert acc.result()["self"][0, 0] == pytest.approx(1.0)


def test_a_table_of_other_statistics_is_refused():
    cap = make_capture(identity(), head_stats=np.zeros((1, 1, 8)))  # before sep_sep, rest_sep
    with pytest.raises(CaptureFileError, match="holds 8 statistics per head, this version 10"):
        HeadStats().update(cap)
