"""How Clark et al. 2019 turn a map into head guesses and score them (Table 1 rules).

Written against their released code (clarkkev/attention-analysis,
Syntax_Analysis.ipynb: ``attn_head_predictor``, ``offset_predictor``,
``evaluate_predictor``). Words are 0-indexed here; a head of -1 is the root.

Guesses, on the word-by-word weights W [..., n, n] of a sentence's n words
(the [CLS]/[SEP] rows and columns cut away, as they do):

- ``dep_to_head``: word d's guess is ``argmax_j W[d, j]`` (the word it attends
  to most);
- ``head_to_dep``: word d's guess is ``argmax_j W[j, d]`` (the word that attends
  most to it: their "transpose" mode, the map read from the head's side);
- ``head_row`` (this library's earlier reading, not theirs): the arc d -> h is
  right when ``argmax_j W[h, j] == d`` (the head's own most-attended word is the
  dependent; a head with several dependents gets at most one right).

Ties, as theirs: the diagonal is set to 0, not removed, before the argmax, and
the argmax takes the first (leftmost) maximum; so a row with no weight on the
other words guesses the first word, or the word itself.

The fixed-offset baseline guesses head = d + k for each k of a range (theirs:
-3..2), clamped to the sentence: a guess left of the first word is the root, one
right of the last word is the last word.

Possessives (their "Special case for poss", section 4.2): for an arc labelled
``poss`` (Stanford) or ``nmod:poss`` (UD) whose next word is ``'s`` or ``s'``
(exactly those strings), the guess scored is the next word's, so the clitic
stands for its possessor. As in their code, this applies only when the
possessor's own guess is not the last word (their ``p < len(words)``). For
``head_row`` it is the head's row that must point at the clitic.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DIRECTIONS = ("dep_to_head", "head_to_dep", "head_row")
# Clark et al.'s two readings: "dep->head" (their "normal") and "head<-dep" ("transpose").
CLARK_DIRECTIONS = DIRECTIONS[:2]
# A tie between (layer, head, direction) candidates goes, as theirs (the last of a sort
# on (accuracy, layer, head, name)), to the higher layer, then the higher head, then
# the transposed reading ("head<-dep" sorts after "dep->head"); head_row ranks below.
DIRECTION_RANK = {"head_row": 0, "dep_to_head": 1, "head_to_dep": 2}

POSSESSIVE_RELATIONS = frozenset({"poss", "nmod:poss"})
POSSESSIVE_CLITICS = frozenset({"'s", "s'"})
BASELINE_OFFSETS = (-3, 2)  # inclusive: their range(-3, 3)


def argmax_guesses(word_weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row guesses, column guesses), each [..., n] int: the word each word attends to
    most, and the word that attends most to each word (diagonal 0, first maximum)."""
    w = np.array(word_weights, np.float64)  # a copy: the diagonal is overwritten
    n = w.shape[-1]
    w[..., np.arange(n), np.arange(n)] = 0.0
    return w.argmax(-1), w.argmax(-2)


def offset_guesses(n: int, offsets: tuple[int, int] = BASELINE_OFFSETS) -> np.ndarray:
    """[K, n] int: word d's guess d + k for each k in offsets[0]..offsets[1], clamped to
    -1 (the root) .. n - 1 (the last word)."""
    ks = np.arange(offsets[0], offsets[1] + 1)[:, None]
    return np.clip(np.arange(n)[None, :] + ks, -1, n - 1)


def possessive_arcs(words: Sequence[str], deprels: Sequence[str]) -> np.ndarray:
    """[n] bool: the arcs the possessive rule may apply to (a possessive label and the
    next word a clitic); `deprels` are the full labels (``nmod:poss``, not ``nmod``)."""
    n = len(words)
    out = np.zeros(n, bool)
    for i in range(n - 1):
        out[i] = deprels[i] in POSSESSIVE_RELATIONS and words[i + 1] in POSSESSIVE_CLITICS
    return out


def score_guesses(guess: np.ndarray, heads: np.ndarray, possessive: np.ndarray) -> np.ndarray:
    """[..., n] bool: whether each word's guess is its head, with the possessive rule.

    Args:
      guess: [..., n] int, each word's guessed head (-1 = root).
      heads: [n] int, the gold heads (-1 = root).
      possessive: [n] bool from `possessive_arcs`, or all False to score as is.
    """
    n = heads.shape[0]
    hits = guess == heads
    if not possessive.any():
        return hits
    nxt = np.minimum(np.arange(n) + 1, n - 1)
    clitic_hits = guess[..., nxt] == heads
    use = possessive & (guess < n - 1)  # their `p < len(words)`, 1-indexed
    return np.where(use, clitic_hits, hits)


def score_head_rows(row_guess: np.ndarray, heads: np.ndarray, possessive: np.ndarray) -> np.ndarray:
    """[..., n] bool for ``head_row``: whether the head's own row guess is the dependent
    (the clitic after a possessor, under the possessive rule); never for the root arc."""
    n = heads.shape[0]
    target = np.where(possessive, np.arange(n) + 1, np.arange(n))
    has_head = heads >= 0
    return np.where(has_head, row_guess[..., np.maximum(heads, 0)] == target, False)
