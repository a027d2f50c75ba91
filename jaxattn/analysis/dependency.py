"""Heads that track syntactic dependencies (Clark et al. 2019, section 4.2 and Table 1).

Each head is a zero-parameter classifier on word-level weights
(`word_level_attention`; split words' rows the mean of their pieces, as the
paper states, or the first piece's, as their released code does by default),
read in two directions (`dependency_rules`: the word a dependent attends to
most, ``dep_to_head``; the word that attends most to it, ``head_to_dep``). The
accuracy of (layer, head, direction) for relation r is the share of r's arcs it
gets right, with their possessive rule. The best head for r is the
(layer, head, direction) with the highest accuracy (ties: `DIRECTION_RANK`).
The baseline guesses head = dependent + k, clamped to the sentence, for each k
of -3..2; the best k is the most accurate (ties: the larger k, as theirs).

The first row, ``all``, scores every word of the corpus, the root and the
punctuation included, as their code's "all" does (so no head gets a root arc
right, and a baseline only when it points left of the first word). The root
arcs have no row of their own, as in their Table 1. Arcs to or from a word that
no token covers are left out.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

import numpy as np

from jaxattn.analysis.dependency_rules import (
    BASELINE_OFFSETS,
    CLARK_DIRECTIONS,
    DIRECTION_RANK,
    DIRECTIONS,
    argmax_guesses,
    offset_guesses,
    possessive_arcs,
    score_guesses,
    score_head_rows,
)
from jaxattn.analysis.tokens import SpecialTokens, detect_specials
from jaxattn.analysis.weights import capture_weights, check_layout
from jaxattn.analysis.words import WORD_ROWS, align_words, word_level_attention
from jaxattn.capture import Capture
from jaxattn.errors import InputError, UsageError
from jaxattn.inputs.conllu import Sentence, coarse_relation

ALL = "all"  # the row that scores every word


class DependencyHeads:
    """Streams Clark et al.'s dependency-head accuracies over a parsed corpus.

    Call ``update(capture, sentence)`` with the capture of the sentence's words
    joined by spaces (see `align_words`); ``result()`` gives the report.json
    table. Memory is O(relations * L * H).

    Args:
      kind: weight kind, "attention" (as Clark et al.) or "norm".
      coarse: group relations by their universal label (``nmod:poss`` -> ``nmod``).
      specials: special-token strings; detected per example when None.
      strict: raise on a sentence whose tokens do not align to its words;
        otherwise skip it and count it in ``skipped`` (first reasons in
        ``skip_reasons``).
      rows: how a split word's row is made (`WORD_ROWS`): "mean" (the paper) or
        "first" (the released code's default).
      directions: the readings that compete for best head (`DIRECTIONS`);
        Clark et al.'s two by default.
      possessive: apply their possessive rule (`dependency_rules`).
      offsets: the baseline's offsets, (lowest, highest), both included.
    """

    def __init__(
        self,
        kind: str = "attention",
        coarse: bool = False,
        specials: SpecialTokens | None = None,
        strict: bool = False,
        *,
        rows: str = "mean",
        directions: Sequence[str] = CLARK_DIRECTIONS,
        possessive: bool = True,
        offsets: tuple[int, int] = BASELINE_OFFSETS,
    ):
        if rows not in WORD_ROWS:
            raise UsageError(f"rows must be one of {WORD_ROWS}, not {rows!r}")
        unknown = [d for d in directions if d not in DIRECTIONS]
        if unknown or not directions or len(set(directions)) != len(directions):
            raise UsageError(f"directions must be distinct names of {DIRECTIONS}: {directions!r}")
        if offsets[0] > offsets[1]:
            raise UsageError(f"offsets {offsets!r}: the lowest comes first")
        self.kind, self.coarse, self.specials, self.strict = kind, coarse, specials, strict
        self.rows, self.directions = rows, tuple(directions)
        self.possessive, self.offsets = possessive, (int(offsets[0]), int(offsets[1]))
        self.layout: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        self._correct: dict[str, np.ndarray] = {}  # rel -> [D, L, H] arcs right
        self._baseline: dict[str, np.ndarray] = {}  # rel -> [K] arcs right per offset
        self._count: collections.Counter = collections.Counter()
        self.sentences = 0
        self.skipped = 0
        self.skip_reasons: list[str] = []

    @property
    def settings(self) -> dict:
        """The definition's choices, for report.json's meta."""
        return {
            "word_rows": self.rows,
            "directions": list(self.directions),
            "possessive_rule": self.possessive,
            "baseline_offsets": list(self.offsets),
            "relations": "coarse" if self.coarse else "full",
        }

    def update(self, capture: Capture, sentence: Sentence) -> None:
        """Add one parsed sentence and its capture.

        Raises:
          InputError: the tokens do not align to the words (only when strict).
          UsageError: no Capture, or no Sentence (`read_conllu`'s) for it.
        """
        self.layout = check_layout(self.layout, capture)
        if not isinstance(sentence, Sentence):
            raise UsageError(
                "the dependency heads need each capture's parsed sentence (a Sentence of "
                f"read_conllu), got {type(sentence).__name__}"
            )
        specials = self.specials or detect_specials(capture.tokens)
        try:
            wmap = align_words(capture.tokens, sentence.words, specials)
        except InputError as e:
            if self.strict:
                raise
            self.skipped += 1
            if len(self.skip_reasons) < 5:
                self.skip_reasons.append(f"{sentence.sent_id or self.sentences}: {e}")
            return
        n = len(sentence.words)
        unit = wmap.word_units()  # [n]: every word has a unit, token-less ones too
        ww = word_level_attention(capture_weights(capture, self.kind), wmap, self.rows)
        rows, cols = argmax_guesses(ww[..., unit[:, None], unit[None, :]])  # [L, H, n] each
        heads = np.asarray(sentence.heads, int) - 1
        poss = possessive_arcs(sentence.words, sentence.deprels)
        if not self.possessive:
            poss[:] = False
        by_direction = {
            "dep_to_head": lambda: score_guesses(rows, heads, poss),
            "head_to_dep": lambda: score_guesses(cols, heads, poss),
            "head_row": lambda: score_head_rows(rows, heads, poss),
        }
        hits = np.stack([by_direction[d]() for d in self.directions])  # [D, L, H, n]
        base = score_guesses(offset_guesses(n, self.offsets), heads, poss)  # [K, n]
        pieces = np.bincount(wmap.token_unit[wmap.token_unit >= 0], minlength=wmap.num_units)
        has_tokens = pieces[unit] > 0
        scored = has_tokens & ((heads < 0) | has_tokens[np.maximum(heads, 0)])
        labels = [coarse_relation(r) if self.coarse else r for r in sentence.deprels]
        groups = collections.defaultdict(list)
        for w in np.flatnonzero(scored):
            groups[ALL].append(w)
            if heads[w] >= 0:
                groups[labels[w]].append(w)
        for rel, words in groups.items():
            self._correct[rel] = self._correct.get(rel, 0) + hits[..., words].sum(-1)
            self._baseline[rel] = self._baseline.get(rel, 0) + base[:, words].sum(-1)
            self._count[rel] += len(words)
        self.sentences += 1

    def accuracies(self) -> dict[str, np.ndarray]:
        """relation -> [D, L, H] accuracy per (direction, layer, head), D as ``directions``."""
        return {rel: self._correct[rel] / self._count[rel] for rel in self._count}

    def baseline_accuracies(self) -> dict[str, dict[int, float]]:
        """relation -> {offset k: accuracy of head = dependent + k, clamped}."""
        low = self.offsets[0]
        return {
            rel: {low + i: float(c) / n for i, c in enumerate(self._baseline[rel])}
            for rel, n in self._count.items()
        }

    def _rank(self, right: np.ndarray, i: tuple[int, int, int]) -> tuple:
        """Sort key of candidate (direction, layer, head) index i: arcs right, then the
        tie order of Clark et al.'s code (higher layer, higher head, `DIRECTION_RANK`)."""
        layers, heads = self.layout
        return right[i], layers[i[1]], heads[i[2]], DIRECTION_RANK[self.directions[i[0]]]

    def result(self) -> dict[str, dict]:
        """The report.json ``dependency_heads`` table: ``all``, then relations by
        decreasing count.

        Returns:
          {relation: {"best_head": [layer, head], "direction": a name of
          `DIRECTIONS`, "accuracy": float, "baseline_offset": int,
          "baseline_accuracy": float, "count": int}}, layer and head being the
          capture's 0-indexed layer and head numbers.
        """
        if self.layout is None:
            return {}
        layers, heads = self.layout
        order = sorted(self._count.items(), key=lambda kv: (kv[0] != ALL, -kv[1], kv[0]))
        out = {}
        for rel, count in order:
            right = self._correct[rel]  # [D, L, H] ints: ties compare exactly
            d, li, hi = max(np.ndindex(right.shape), key=lambda i: self._rank(right, i))
            k = max(range(len(self._baseline[rel])), key=lambda i: (self._baseline[rel][i], i))
            out[rel] = {
                "best_head": [int(layers[li]), int(heads[hi])],
                "direction": self.directions[d],
                "accuracy": float(right[d, li, hi]) / count,
                "baseline_offset": self.offsets[0] + k,
                "baseline_accuracy": float(self._baseline[rel][k]) / count,
                "count": int(count),
            }
        return out
