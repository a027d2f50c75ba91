"""jaxattn's Clark et al. analyses equal a reference written from their released code.

Random corpora (split words, possessive clitics, root and punctuation arcs) are
scored both ways: `clark_reference` (their loops) and `jaxattn.analysis`. One
corpus has continuous maps (no ties), one has maps in sixteenths (ties
everywhere), so the tie rules are compared too.
"""

from __future__ import annotations

import numpy as np
import pytest
from analysis_helpers import make_capture
from clark_reference import (
    avg_attns,
    entropies,
    evaluate,
    head_guesses,
    offset_guesses,
    table,
    word_word,
)

from jaxattn.analysis import DependencyHeads, HeadStats, head_statistics
from jaxattn.inputs.conllu import Sentence

# word -> its pieces, as BERT-uncased splits it ("'s" is two word-initial pieces)
VOCAB = {
    "the": ["the"],
    "dog": ["dog"],
    "john": ["john"],
    "'s": ["'", "s"],
    "s'": ["s", "'"],
    "barks": ["bar", "##ks"],
    "strawberries": ["straw", "##berries"],
    "unbelievably": ["un", "##believ", "##ably"],
    ".": ["."],
    ",": [","],
}
RELATIONS = ("det", "nsubj", "obj", "nmod:poss", "case", "punct", "amod")
LAYERS, HEADS = 2, 3


def random_corpus(rng, n_sentences: int, quantised: bool):
    """[(example in the authors' layout, capture, Sentence)]."""
    vocab = [w for w in VOCAB if not (quantised and len(VOCAB[w]) > 2)]
    out = []
    for _ in range(n_sentences):
        n = int(rng.integers(1, 9))
        words = [str(w) for w in rng.choice(vocab, n)]
        heads = [int(h) for h in rng.integers(0, n + 1, n)]
        heads = [h if h != i + 1 else 0 for i, h in enumerate(heads)]
        relns = ["root" if h == 0 else str(rng.choice(RELATIONS)) for h in heads]
        for i in range(n - 1):  # possessors before their clitic, often
            if words[i + 1] in ("'s", "s'") and rng.random() < 0.7 and heads[i]:
                relns[i] = "nmod:poss"
        tokens, word_tokens = ["[CLS]"], [[0]]
        for w in words:
            word_tokens.append(list(range(len(tokens), len(tokens) + len(VOCAB[w]))))
            tokens += VOCAB[w]
        word_tokens.append([len(tokens)])
        tokens.append("[SEP]")
        t = len(tokens)
        if quantised:  # rows of sixteenths: exact sums, many exact ties
            maps = rng.multinomial(16, np.full(t, 1 / t), (LAYERS, HEADS, t)) / 16
        else:
            maps = rng.dirichlet(np.full(t, 0.3), (LAYERS, HEADS, t))
        maps = maps.astype(np.float32).astype(np.float64)  # what the capture holds
        ex = dict(words=words, heads=heads, relns=relns)
        for mode in ("mean", "first"):
            ex[mode] = [[word_word(m, word_tokens, mode) for m in layer] for layer in maps]
        cap = make_capture(maps, tokens=tokens, sentence_b_start=None)
        sent = Sentence(words=tuple(words), heads=tuple(heads), deprels=tuple(relns))
        out.append((ex, cap, sent))
    return out


NAMES = {"dep->head": "dep_to_head", "head<-dep": "head_to_dep"}


@pytest.mark.parametrize("quantised", [False, True], ids=["continuous", "ties"])
@pytest.mark.parametrize("rows", ["mean", "first"])
def test_dependency_heads_equal_the_reference(quantised, rows):
    corpus = random_corpus(np.random.default_rng(7 + quantised), 60, quantised)
    examples = [dict(ex, word_attns=ex[rows]) for ex, _, _ in corpus]
    acc = DependencyHeads(rows=rows)
    for _, cap, sent in corpus:
        acc.update(cap, sent)
    got, accs, base = acc.result(), acc.accuracies(), acc.baseline_accuracies()
    want = table(examples, LAYERS, HEADS)
    assert set(got) == set(want) - {"root"} and list(got)[0] == "all"
    assert got["all"]["count"] == sum(len(ex["words"]) for ex in examples)
    for rel, ((layer, head, key), accuracy, offset, baseline) in want.items():
        if rel == "root":
            continue
        row = got[rel]
        assert (row["best_head"], row["direction"]) == ([layer, head], NAMES[key]), rel
        assert row["accuracy"] == pytest.approx(accuracy)
        assert (row["baseline_offset"], row["baseline_accuracy"]) == (offset, baseline), rel
    # every (direction, layer, head) and every offset, not only the best
    for d, mode in enumerate(("normal", "transpose")):
        for layer in range(LAYERS):
            for head in range(HEADS):

                def guess(ex, layer=layer, head=head, mode=mode):
                    return head_guesses(ex["word_attns"][layer][head], mode)

                right, wrong = evaluate(examples, guess)
                for rel in (right.keys() | wrong.keys()) - {"root"}:
                    share = right[rel] / (right[rel] + wrong[rel])
                    assert accs[rel][d, layer, head] == pytest.approx(share), (rel, mode)
    for k in range(-3, 3):
        right, wrong = evaluate(examples, lambda ex, k=k: offset_guesses(len(ex["words"]), k))
        for rel in (right.keys() | wrong.keys()) - {"root"}:
            assert base[rel][k] == pytest.approx(right[rel] / (right[rel] + wrong[rel]))


def test_head_statistics_equal_the_reference():
    rng = np.random.default_rng(3)
    token_lists = [
        "[CLS] the dog , bar ##ks . [SEP]".split(),
        "[CLS] a . [SEP] b , c [SEP]".split(),  # a pair: two [SEP]s, as their data
        "[CLS] [SEP]".split(),
    ]
    stats = HeadStats(kinds=["attention"])
    want = {}
    for tokens in token_lists:
        t = len(tokens)
        maps = rng.dirichlet(np.full(t, 0.5), (LAYERS, HEADS, t)).astype(np.float32)
        stats.update(make_capture(maps, tokens=tokens, sentence_b_start=None))
        ref = avg_attns(tokens, maps.astype(np.float64))
        ref["entropy"], ref["entropy_cls"], ref["uniform"] = entropies(maps.astype(np.float64))
        for name, value in ref.items():
            want[name] = want.get(name, 0.0) + np.asarray(value) / len(token_lists)
    got = stats.result()
    for name in ("cls", "sep", "punct", "self", "prev", "next", "entropy", "entropy_cls"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, err_msg=name)
    # [SEP] -> [SEP] and other -> [SEP]: their sums over 2 and T - 2 rows (two [SEP]s)
    for name in ("sep_sep", "rest_sep"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, err_msg=name)
    assert stats.uniform_entropy == pytest.approx(want["uniform"])
    one = head_statistics(np.full((1, 1, 3, 3), 1 / 3), ["[CLS]", "a", "[SEP]"])
    assert one["sep_sep"][0, 0] == pytest.approx(1 / 3)  # their code would halve it (1/6)
