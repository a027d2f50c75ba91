"""Clark et al.'s Table 1 rules on maps small enough to score by hand.

Each case is a word-level map (rows: [CLS], the words, [SEP]) lifted to tokens,
with the expected accuracies worked out in the comments.
"""

from __future__ import annotations

import numpy as np
import pytest
from analysis_helpers import make_capture

from jaxattn.analysis import DIRECTIONS, DependencyHeads, Sentence, align_words
from jaxattn.errors import UsageError


def capture(word_rows, tokens, words):
    """A capture whose word-level map is `word_rows` [L, H, U, U] (split words' pieces
    share their word's row and split its column evenly)."""
    wmap = align_words(tokens, words)
    u = wmap.token_unit
    sizes = np.bincount(u)
    rows = np.asarray(word_rows, float)
    return make_capture(rows[..., u, :][..., :, u] / sizes[u], tokens=tokens, sentence_b_start=None)


def sentence(words, heads, deprels):
    return Sentence(words=tuple(words), heads=tuple(heads), deprels=tuple(deprels))


ABC = dict(tokens="[CLS] a b c [SEP]".split(), words=["a", "b", "c"])
# a -> b (det), b the root, c -> b (obj)
ABC_PARSE = sentence(["a", "b", "c"], [2, 0, 2], ["det", "root", "obj"])
ABC_ROWS = [  # [CLS], a, b, c, [SEP]
    [0.2, 0.2, 0.2, 0.2, 0.2],
    [0.1, 0.0, 0.6, 0.2, 0.1],  # a's most-attended word: b
    [0.1, 0.5, 0.0, 0.3, 0.1],  # b's: a
    [0.1, 0.4, 0.3, 0.0, 0.2],  # c's: a
    [0.2, 0.2, 0.2, 0.2, 0.2],
]


def test_the_three_directions():
    acc = DependencyHeads(directions=DIRECTIONS)
    acc.update(capture([[ABC_ROWS]], **ABC), ABC_PARSE)
    accs = {rel: a[:, 0, 0].tolist() for rel, a in acc.accuracies().items()}
    # dep_to_head: a's row -> b (right), c's row -> a (wrong).
    # head_to_dep: who attends most to a? b (0.5 > c's 0.4): right; to c? b (0.3 > a's 0.2): right.
    # head_row: b's row -> a: right for a -> b, wrong for c -> b.
    assert accs["det"] == [1.0, 1.0, 1.0]
    assert accs["obj"] == [0.0, 1.0, 0.0]
    # all three words; the root b is never right for a head
    assert accs["all"] == [1 / 3, 2 / 3, 1 / 3]
    out = acc.result()
    assert out["obj"]["direction"] == "head_to_dep" and out["all"]["accuracy"] == 2 / 3


def test_the_bounded_clamped_baseline():
    acc = DependencyHeads()
    acc.update(capture([[ABC_ROWS]], **ABC), ABC_PARSE)
    # 1-indexed guesses i + k clamped to 0 (root) .. 3: a=1, b=2 (root), c=3
    # k=-3: 0 0 0 -> b (root) right; k=-2: 0 0 1 -> b; k=-1: 0 1 2 -> c;
    # k=0: wrong; k=+1: 2 3 3 -> a; k=+2: 3 3 3 -> none
    assert acc.baseline_accuracies()["all"] == {
        -3: 1 / 3,
        -2: 1 / 3,
        -1: 1 / 3,
        0: 0.0,
        1: 1 / 3,
        2: 0.0,
    }
    out = acc.result()
    assert out["all"]["baseline_offset"] == 1  # four offsets tie: the largest wins
    assert out["obj"]["baseline_offset"] == -1 and out["obj"]["baseline_accuracy"] == 1.0
    assert "root" not in out
    wide = DependencyHeads(offsets=(-5, 5))
    wide.update(capture([[ABC_ROWS]], **ABC), ABC_PARSE)
    assert list(wide.baseline_accuracies()["all"]) == list(range(-5, 6))


def test_ties_and_empty_rows():
    zero = [
        [0.2, 0.2, 0.2, 0.2, 0.2],
        [0.0, 0.0, 0.0, 0.0, 1.0],  # a: nothing on a word: the argmax is a itself (wrong)
        [1.0, 0.0, 0.0, 0.0, 0.0],  # b: nothing on a word: the first word, a
        [0.1, 0.1, 0.7, 0.0, 0.1],  # c: b (right)
        [0.2, 0.2, 0.2, 0.2, 0.2],
    ]
    acc = DependencyHeads()
    acc.update(capture([[zero], [zero]], **ABC), ABC_PARSE)  # two identical layers
    accs = acc.accuracies()
    assert accs["det"][0].tolist() == [[0.0], [0.0]]  # not b, the first other word
    assert accs["obj"][0].tolist() == [[1.0], [1.0]]
    # layers tie on every relation: the higher layer wins, then the transposed map
    out = acc.result()
    assert out["obj"]["best_head"] == [1, 0] and out["obj"]["direction"] == "dep_to_head"
    assert out["det"]["best_head"] == [1, 0] and out["det"]["direction"] == "head_to_dep"
    # (who attends most to a? b, all on [CLS], is 0 on a; c 0.1: c, wrong for a -> b)
    assert out["det"]["accuracy"] == 0.0


SPLIT = dict(
    tokens="[CLS] straw ##berries are red [SEP]".split(), words=["strawberries", "are", "red"]
)
SPLIT_PARSE = sentence(SPLIT["words"], [3, 3, 0], ["nsubj", "cop", "root"])


@pytest.mark.parametrize(("rows", "right"), [("mean", 1.0), ("first", 0.0)])
def test_a_split_words_row(rows, right):
    m = np.full((6, 6), 1 / 6)
    m[1] = [0.0, 0.0, 0.0, 0.9, 0.1, 0.0]  # "straw" -> are
    m[2] = [0.0, 0.0, 0.0, 0.0, 1.0, 0.0]  # "##berries" -> red; the mean: are 0.45, red 0.55
    acc = DependencyHeads(rows=rows)
    acc.update(make_capture(m, tokens=SPLIT["tokens"], sentence_b_start=None), SPLIT_PARSE)
    assert acc.accuracies()["nsubj"][0, 0, 0] == right
    assert acc.settings["word_rows"] == rows


POSS = dict(tokens="[CLS] john ' s dog barks [SEP]".split(), words=["john", "'s", "dog", "barks"])
# john -> dog (nmod:poss), 's -> john (case), dog -> barks (nsubj), barks the root
POSS_PARSE = sentence(POSS["words"], [3, 1, 4, 0], ["nmod:poss", "case", "nsubj", "root"])


def poss_rows(john_attends_to: int):
    rows = np.full((6, 6), 0.05)
    rows[1, john_attends_to] = 0.75  # john's guess
    rows[2, 3] = 0.75  # 's -> dog: the possessor's head
    return rows / rows.sum(-1, keepdims=True)


def test_the_possessive_rule():
    # head 0: john -> 's; head 1: john -> barks, the last word (their `p < len(words)`
    # then skips the rule); both: 's -> dog
    caps = capture([[poss_rows(2), poss_rows(4)]], **POSS)
    on, off = DependencyHeads(directions=DIRECTIONS), DependencyHeads(possessive=False)
    on.update(caps, POSS_PARSE)
    off.update(caps, POSS_PARSE)
    assert on.accuracies()["nmod:poss"][0, 0].tolist() == [1.0, 0.0]  # 's's guess, john's
    assert off.accuracies()["nmod:poss"][0, 0].tolist() == [0.0, 0.0]  # john's own guesses
    # head_row: dog's row must point at the clitic (it points at 's in neither head)
    assert on.accuracies()["nmod:poss"][2, 0].tolist() == [0.0, 0.0]
    coarse = DependencyHeads(coarse=True)  # grouped as nmod, still a possessive arc
    coarse.update(caps, POSS_PARSE)
    assert coarse.accuracies()["nmod"][0, 0].tolist() == [1.0, 0.0]


def test_bad_options():
    with pytest.raises(UsageError, match="rows"):
        DependencyHeads(rows="max")
    with pytest.raises(UsageError, match="directions"):
        DependencyHeads(directions=["head_to_head"])
    with pytest.raises(UsageError, match="lowest"):
        DependencyHeads(offsets=(2, -3))
