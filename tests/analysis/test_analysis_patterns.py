"""Kovaleva et al. 2019 classes and Vig 2019 patterns on hand-made maps."""

from __future__ import annotations

import numpy as np
import pytest
from analysis_helpers import (
    PAIR_B,
    PAIR_TOKENS,
    T,
    block_diagonal,
    identity,
    make_capture,
    next_token,
    one_hot,
    previous_token,
    uniform,
)

from jaxattn.analysis import KOVALEVA_CLASSES, PatternCounts, kovaleva_classes, vig_patterns

SINGLE = ("[CLS]", "the", "cat", "saw", "the", "dog", ".", "[SEP]")


def kclass(m, tokens=PAIR_TOKENS, b=PAIR_B) -> str:
    return KOVALEVA_CLASSES[int(kovaleva_classes(np.asarray(m)[None, None], tokens, b)[0, 0])]


def vig(m, tokens=PAIR_TOKENS, b=PAIR_B) -> set[str]:
    out = vig_patterns(np.asarray(m)[None, None], tokens, b)
    return {name for name, hit in out.items() if hit[0, 0]}


@pytest.mark.parametrize(
    ("name", "m", "kovaleva", "vig_expected"),
    [
        ("uniform", uniform(), "heterogeneous", {"bag_of_words"}),
        ("identity", identity(), "diagonal", set()),
        ("next token", next_token(), "diagonal", {"next_word"}),
        ("previous token", previous_token(), "diagonal", {"previous_word"}),
        ("one-hot [SEP]", one_hot(PAIR_TOKENS.index("[SEP]")), "vertical", {"delimiter"}),
        ("one-hot [CLS]", one_hot(0), "vertical", {"delimiter"}),
        ("one-hot stripe", one_hot(3), "vertical", set()),
        ("block diagonal", block_diagonal(), "block", {"bag_of_words"}),
        (
            "half [SEP], half next",
            0.5 * one_hot(T - 1) + 0.5 * next_token(),
            "vertical+diagonal",
            {"delimiter", "next_word"},
        ),
    ],
)
def test_hand_maps(name, m, kovaleva, vig_expected):
    assert kclass(m) == kovaleva, name
    assert vig(m) == vig_expected, name


def test_block_needs_a_pair():
    assert kclass(block_diagonal(), b=None) == "heterogeneous"


def test_uniform_single_sentence_any_length():
    for t in (5, 8, 12, 40):
        tokens = ("[CLS]", *["w"] * (t - 2), "[SEP]")
        assert kclass(uniform(t), tokens, None) == "heterogeneous"


def test_identical_words_in_the_same_sentence():
    m = identity(len(SINGLE))
    m[1, 1], m[1, 4] = 0.0, 1.0  # the -> the
    m[4, 4], m[4, 1] = 0.0, 1.0
    assert "identical_word" in vig(m, SINGLE, None)
    assert "identical_word" not in vig(identity(len(SINGLE)), SINGLE, None)
    assert "other_sentence_word" not in vig(m, SINGLE, None)


def test_same_word_in_the_other_sentence():
    # i, the, store occur in both sentences; each attends to its twin over there
    twins = {1: 12, 4: 9, 5: 10, 12: 1, 9: 4, 10: 5}
    m = identity()
    for i, j in twins.items():
        m[i] = 0.0
        m[i, j] = 1.0
    found = vig(m)
    assert "other_sentence_word" in found and "identical_word" not in found


def test_pattern_counts_per_layer_fractions():
    layer0 = np.stack([identity(), one_hot(T - 1)])
    layer1 = np.stack([uniform(), uniform()])
    acc = PatternCounts()
    acc.update(make_capture(np.stack([layer0, layer1])))
    acc.update(make_capture(np.stack([layer0, layer1])))
    out = acc.result()
    assert out["diagonal"].tolist() == [0.5, 0.0]
    assert out["vertical"].tolist() == [0.5, 0.0]
    assert out["heterogeneous"].tolist() == [0.0, 1.0]
    assert out["bag_of_words"].tolist() == [0.0, 1.0]
    total = sum(out[c] for c in KOVALEVA_CLASSES)
    np.testing.assert_allclose(total, 1.0)


SEPS = [i for i, tok in enumerate(PAIR_TOKENS) if tok == "[SEP]"]
BOTH_SEPS = sum(one_hot(i) for i in SEPS) / len(SEPS)


@pytest.mark.parametrize(
    ("kovaleva", "m"),
    [
        # Kovaleva et al. 2019 (their Figure 1): "vertical" is mainly attention to [CLS], [SEP];
        ("vertical", BOTH_SEPS),
        ("vertical", (one_hot(0) + one_hot(SEPS[0]) + one_hot(SEPS[1])) / 3),
        # "diagonal" is attention to the previous / following tokens,
        ("diagonal", previous_token()),
        ("diagonal", 0.5 * previous_token() + 0.5 * next_token()),
        # "vertical+diagonal" a mix of the two,
        ("vertical+diagonal", 0.5 * BOTH_SEPS + 0.5 * next_token()),
        # "block" intra-sentence attention in a sentence pair.
        ("block", block_diagonal()),
    ],
)
def test_the_papers_classes_blurred_toward_uniform(kovaleva, m):
    """The five classes as the paper defines them keep their class with 30% of the
    mass spread uniformly (a map is never as clean as a drawing)."""
    assert kclass(m) == kovaleva
    assert kclass(0.7 * m + 0.3 * uniform()) == kovaleva


def test_input_dependent_maps_are_heterogeneous():
    """Heterogeneous: "highly variable depending on the specific input"; random rows
    with no shared structure, sparse or broad."""
    rng = np.random.default_rng(0)
    for concentration in (0.1, 0.3, 1.0):
        for _ in range(5):
            assert kclass(rng.dirichlet(np.full(T, concentration), size=T)) == "heterogeneous"
