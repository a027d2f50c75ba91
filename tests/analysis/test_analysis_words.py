"""Token -> word maps and word-level attention (Clark et al. 2019)."""

from __future__ import annotations

import numpy as np
import pytest
from analysis_helpers import PAIR_TOKENS

from jaxattn.analysis import align_words, group_words, normalise_text, word_level_attention
from jaxattn.errors import UsageError

SPLIT = ("[CLS]", "straw", "##berries", "are", "red", "[SEP]")


def test_word_level_attention_of_a_split_word():
    a = np.array(
        [
            [0.1, 0.2, 0.3, 0.1, 0.1, 0.2],
            [0.0, 0.5, 0.1, 0.2, 0.1, 0.1],
            [0.2, 0.3, 0.3, 0.0, 0.0, 0.2],
            [0.1, 0.1, 0.1, 0.1, 0.1, 0.5],
            [0.6, 0.0, 0.0, 0.2, 0.2, 0.0],
            [0.0, 0.0, 1.0, 0.0, 0.0, 0.0],
        ]
    )
    wmap = group_words(SPLIT)
    assert wmap.units == ("[CLS]", "strawberries", "are", "red", "[SEP]")
    assert wmap.token_unit.tolist() == [0, 1, 1, 2, 3, 4]
    assert wmap.unit_word.tolist() == [-1, 0, 1, 2, -1]
    w = word_level_attention(a[None, None], wmap)[0, 0]
    expected = np.array(
        [
            [0.1, 0.5, 0.1, 0.1, 0.2],  # to a word: sum over its pieces
            [0.1, 0.6, 0.1, 0.05, 0.15],  # from a word: mean over its pieces' rows
            [0.1, 0.2, 0.1, 0.1, 0.5],
            [0.6, 0.0, 0.2, 0.2, 0.0],
            [0.0, 1.0, 0.0, 0.0, 0.0],
        ]
    )
    np.testing.assert_allclose(w, expected, atol=1e-12)
    np.testing.assert_allclose(w.sum(-1), 1.0)
    # the released code's default: a split word's row is its first piece's ("straw")
    first = word_level_attention(a[None, None], wmap, rows="first")[0, 0]
    expected[1] = [0.0, 0.6, 0.2, 0.1, 0.1]
    np.testing.assert_allclose(first, expected, atol=1e-12)
    with pytest.raises(UsageError, match="rows"):
        word_level_attention(a, wmap, rows="max")


def test_dropping_specials():
    wmap = group_words(SPLIT, keep_specials=False)
    assert wmap.units == ("strawberries", "are", "red")
    assert wmap.token_unit.tolist() == [-1, 0, 0, 1, 2, -1]
    w = word_level_attention(np.full((6, 6), 1 / 6), wmap)
    np.testing.assert_allclose(w, np.array([[2, 1, 1]] * 3) / 6)


def test_group_words_on_the_design_pair():
    wmap = group_words(PAIR_TOKENS)
    assert len(wmap.units) == 18 and "strawberries" in wmap.units
    assert wmap.token_unit[15] == wmap.token_unit[16]


def test_group_words_roberta():
    tokens = ("<s>", "At", "Ġthe", "Ġstore", ",", "ĠI", "Ġbought", "Ġstraw", "berries", ".", "</s>")
    wmap = group_words(tokens)
    assert wmap.units == (
        "<s>",
        "At",
        "the",
        "store",
        ",",
        "I",
        "bought",
        "strawberries",
        ".",
        "</s>",
    )


def test_align_conllu_words_with_contractions_and_accents():
    words = ["I", "do", "n't", "like", "Café", "strawberries", "."]
    # BERT-uncased on "I do n't like Café strawberries ."
    tokens = ["[CLS]", "i", "do", "n", "'", "t", "like", "cafe", "straw", "##berries", ".", "[SEP]"]
    wmap = align_words(tokens, words)
    assert [wmap.units[u] for u in wmap.token_unit] == [
        "[CLS]",
        "I",
        "do",
        "n't",
        "n't",
        "n't",
        "like",
        "Café",
        "strawberries",
        "strawberries",
        ".",
        "[SEP]",
    ]
    assert wmap.word_units().tolist() == [1, 2, 3, 4, 5, 6, 7]


def test_align_a_piece_crossing_a_word_boundary():
    # the original text "don't" tokenised: "don" starts in "do" and ends in "n't"
    wmap = align_words(["[CLS]", "don", "'", "t", "[SEP]"], ["do", "n't"])
    assert wmap.token_unit.tolist() == [0, 1, 2, 2, 3]


def test_align_roberta_bytes():
    words = ["Café", "au", "lait"]
    # "é" = UTF-8 C3 A9 = "Ã©" in GPT-2's byte alphabet, here split over two pieces
    tokens = ["<s>", "Caf", "Ã", "©", "Ġau", "Ġla", "it", "</s>"]
    wmap = align_words(tokens, words)
    assert wmap.token_unit.tolist() == [0, 1, 1, 1, 2, 3, 3, 4]
    assert normalise_text("Café") == "cafe"


def test_align_unknown_tokens():
    wmap = align_words(["[CLS]", "[UNK]", "went", "[UNK]", "[SEP]"], ["☃☃", "went", "🍓"])
    assert wmap.token_unit.tolist() == [0, 1, 2, 3, 4]


def test_align_words_without_pieces_come_last():
    wmap = align_words(["[CLS]", "a", "b", "[SEP]"], ["a", "\u200b", "b"])  # zero-width space
    assert wmap.units == ("[CLS]", "a", "b", "[SEP]", "\u200b")
    assert wmap.word_units().tolist() == [1, 4, 2]
    w = word_level_attention(np.full((4, 4), 0.25), wmap)
    assert w[4].sum() == 0.0 and w[:, 4].sum() == 0.0


@pytest.mark.parametrize(
    ("tokens", "words"),
    [(["[CLS]", "cat", "[SEP]"], ["dog"]), (["[CLS]", "ca", "[SEP]"], ["cat"])],
)
def test_align_mismatch_raises(tokens, words):
    with pytest.raises(ValueError):
        align_words(tokens, words)
