"""CoNLL-U reading and Clark et al. 2019's dependency heads on a hand-made corpus."""

from __future__ import annotations

import numpy as np
import pytest
from analysis_helpers import make_capture

from jaxattn.analysis import DependencyHeads, align_words, coarse_relation, read_conllu
from jaxattn.errors import InputError

CONLLU = """\
# sent_id = s1
# text = The cat sat.
1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_
2\tcat\tcat\tNOUN\tNN\t_\t3\tnsubj\t_\t_
3\tsat\tsit\tVERB\tVBD\t_\t0\troot\t_\tSpaceAfter=No
4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_

# sent_id = s2
1-2\tDon't\t_\t_\t_\t_\t_\t_\t_\t_
1\tDo\tdo\tAUX\tVBP\t_\t3\taux\t_\t_
2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t_\t_
3\teat\teat\tVERB\tVB\t_\t0\troot\t_\t_
3.1\tate\teat\tVERB\tVBD\t_\t_\t_\t3:conj\t_
4\tthe\tthe\tDET\tDT\t_\t5\tdet\t_\t_
5\tstrawberries\tstrawberry\tNOUN\tNNS\t_\t3\tobj\t_\t_
6\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_

# sent_id = s3
1\tmy\tmy\tPRON\tPRP$\t_\t2\tnmod:poss\t_\t_
2\tcat\tcat\tNOUN\tNN\t_\t0\troot\t_\t_
"""

TOKENS = {
    "s1": ["[CLS]", "the", "cat", "sat", ".", "[SEP]"],
    "s2": ["[CLS]", "do", "n", "'", "t", "eat", "the", "straw", "##berries", ".", "[SEP]"],
    "s3": ["[CLS]", "my", "cat", "[SEP]"],
}
# word-level targets (0-indexed words) of the two heads of the one layer:
# head 0 ("dependent -> head"): every word's row on its head (obj's on "the" instead)
# head 1 ("head -> dependent"): head words on one dependent; others on nothing in particular
TARGETS = {
    "s1": ({0: 1, 1: 2, 2: 1, 3: 2}, {0: 3, 1: 0, 2: 1, 3: 0}),
    "s2": ({0: 2, 1: 2, 2: 3, 3: 4, 4: 3, 5: 2}, {0: 3, 1: 3, 2: 4, 3: 5, 4: 3, 5: 3}),
    "s3": ({0: 1, 1: 0}, {0: 1, 1: 0}),
}


def lift(word_rows: np.ndarray, wmap) -> np.ndarray:
    """Token-level map whose word-level attention is exactly `word_rows` [U, U]."""
    sizes = np.bincount(wmap.token_unit, minlength=wmap.num_units)
    u = wmap.token_unit
    return word_rows[u][:, u] / sizes[u][None, :]


def head_map(targets: dict[int, int], wmap) -> np.ndarray:
    """0.5 on [SEP] (which must be ignored), 0.4 on the target word, 0.1 spread."""
    n = wmap.num_units
    units = wmap.word_units()
    rows = np.full((n, n), 0.1 / n)
    rows[:, n - 1] += 0.5
    for w, target in targets.items():
        rows[units[w], units[target]] += 0.4
    rows[[0, n - 1], n - 1] += 0.4  # special rows: anywhere
    return lift(rows, wmap)


def captures_and_sentences():
    for sent in read_conllu(CONLLU.splitlines(keepends=True)):
        wmap = align_words(TOKENS[sent.sent_id], sent.words)
        heads = np.stack([head_map(t, wmap) for t in TARGETS[sent.sent_id]])
        yield make_capture(heads[None], tokens=TOKENS[sent.sent_id], sentence_b_start=None), sent


def test_read_conllu_skips_multiword_tokens_and_empty_nodes(tmp_path):
    path = tmp_path / "tiny.conllu"
    path.write_text(CONLLU, encoding="utf-8")
    sents = list(read_conllu(path))
    assert [s.sent_id for s in sents] == ["s1", "s2", "s3"]
    assert sents[0].text == "The cat sat."
    assert sents[1].words == ("Do", "n't", "eat", "the", "strawberries", ".")
    assert sents[1].heads == (3, 3, 0, 5, 3, 3)
    assert list(sents[2].arcs()) == [(0, 1, "nmod:poss")]
    assert list(sents[2].arcs(coarse=True)) == [(0, 1, "nmod")]
    assert coarse_relation("obl:tmod") == "obl" and coarse_relation("det") == "det"


def test_read_conllu_of_a_file_passes_a_bom_and_names_bad_utf8(tmp_path):
    path = tmp_path / "bom.conllu"
    path.write_bytes(b"\xef\xbb\xbf" + CONLLU.encode())  # as Notepad or Excel save it
    assert [s.sent_id for s in read_conllu(path)] == ["s1", "s2", "s3"]
    latin1 = CONLLU.replace("cat", "caf\u00e9").encode("latin-1")
    path.write_bytes(latin1)
    line = latin1[: latin1.index(b"caf\xe9")].count(b"\n") + 1
    with pytest.raises(InputError, match=rf"bom.conllu:{line}: invalid UTF-8 at byte \d+"):
        list(read_conllu(path))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1\ta\n", "10 tab-separated"),
        ("2\ta\t_\t_\t_\t_\t0\troot\t_\t_\n", "expected 1"),
        ("1\ta\t_\t_\t_\t_\tx\troot\t_\t_\n", "not an integer"),
    ],
)
def test_read_conllu_errors(text, message):
    with pytest.raises(InputError, match=message):
        list(read_conllu([text]))


def test_dependency_heads_table():
    acc = DependencyHeads()
    for cap, sent in captures_and_sentences():
        acc.update(cap, sent)
    out = acc.result()
    assert list(out) == ["all", "det", "punct", "advmod", "aux", "nmod:poss", "nsubj", "obj"]
    assert out["det"] == {
        "best_head": [0, 0],
        "direction": "dep_to_head",
        "accuracy": 1.0,
        "baseline_offset": 1,
        "baseline_accuracy": 1.0,
        "count": 2,
    }
    # "." -> "sat" at k = -1, "." -> "eat" at k = -3: the tie goes to the larger k
    assert out["punct"]["baseline_offset"] == -1 and out["punct"]["baseline_accuracy"] == 0.5
    assert out["obj"] == {
        "best_head": [0, 1],
        "direction": "head_to_dep",  # "eat" attends most to "strawberries" of all words
        "accuracy": 1.0,
        "baseline_offset": -2,
        "baseline_accuracy": 1.0,
        "count": 1,
    }
    # "my" -> "cat", two words: every head is right (the only other word), and the tie goes
    # to the last head, transposed; the baseline +1 and +2 (clamped to "cat") tie: +2.
    assert out["nmod:poss"]["best_head"] == [0, 1]
    assert out["nmod:poss"]["direction"] == "head_to_dep"
    assert out["nmod:poss"]["baseline_offset"] == 2
    # all 12 words, the 3 roots and 2 punctuation marks included; no head gets a root right,
    # the baseline -3 gets all three (clamped to the root) and "." -> "eat"
    assert out["all"]["count"] == 12 and out["all"]["accuracy"] == 8 / 12
    assert acc.baseline_accuracies()["all"] == {
        -3: 4 / 12,
        -2: 2 / 12,
        -1: 1 / 12,
        0: 0.0,
        1: 5 / 12,
        2: 2 / 12,
    }
    accs = acc.accuracies()  # [direction, layer, head]
    np.testing.assert_allclose(accs["det"][:, 0], [[1.0, 0.0], [0.5, 0.5]])
    np.testing.assert_allclose(accs["punct"][:, 0], [[1.0, 0.0], [0.0, 0.0]])
    np.testing.assert_allclose(accs["nsubj"][:, 0], [[1.0, 0.0], [0.0, 1.0]])
    np.testing.assert_allclose(accs["obj"][:, 0], [[0.0, 0.0], [0.0, 1.0]])
    # the head's own row (jaxattn 0.2's reading), on request
    rows = DependencyHeads(directions=["head_row"])
    for cap, sent in captures_and_sentences():
        rows.update(cap, sent)
    np.testing.assert_allclose(rows.accuracies()["det"][0, 0], [0.5, 1.0])
    np.testing.assert_allclose(rows.accuracies()["nsubj"][0, 0], [1.0, 1.0])  # sat -> cat


def test_coarse_relations_and_unaligned_sentences():
    acc = DependencyHeads(coarse=True)
    pairs = list(captures_and_sentences())
    for cap, sent in pairs:
        acc.update(cap, sent)
    bad = make_capture(
        np.full((1, 2, 4, 4), 0.25), tokens=["[CLS]", "a", "b", "[SEP]"], sentence_b_start=None
    )
    acc.update(bad, pairs[2][1])
    assert "nmod" in acc.result() and "nmod:poss" not in acc.result()
    assert acc.sentences == 3 and acc.skipped == 1 and "s3" in acc.skip_reasons[0]
    with pytest.raises(InputError):
        DependencyHeads(strict=True).update(bad, pairs[2][1])
