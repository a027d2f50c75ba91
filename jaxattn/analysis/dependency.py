"""Heads that track syntactic dependencies (Clark et al. 2019, section 4.2 and Table 1).

Each head is a classifier: on word-level weights (`word_level_attention`, with
[CLS]/[SEP] kept as units so rows are distributions, then ignored), the word a
word attends to most is its prediction. For an arc dependent d -> head h with
relation r, over the other words j (self and the special tokens excluded, as
in Clark et al.'s code; ties go to the leftmost word):

- ``dep_to_head`` is correct when ``argmax_j W[d, j] == h`` (the dependent
  attends most to its head);
- ``head_to_dep`` is correct when ``argmax_j W[h, j] == d`` (the head attends
  most to this dependent). A head with several dependents of one relation can
  get at most one of them right. (Clark et al.'s code scores this direction on
  the transposed map, argmax_j W[j, d] == h; this library uses the head's own
  row, the direct reading of "predicting the dependent from the head".)

The accuracy of (layer, head, direction) for r is correct / count over every arc
of r in the corpus; the best head for r is the (layer, head, direction) with the
highest accuracy (ties: the first in layer, head, direction order). The
fixed-offset baseline predicts head = dependent + k for one k per relation, in
words; the best k is the most common offset (ties: smaller |k|, then negative),
and its accuracy is that offset's share of the arcs. The root arc is left out.
"""

from __future__ import annotations

import collections

import numpy as np

from jaxattn.analysis.tokens import SpecialTokens, detect_specials
from jaxattn.analysis.weights import capture_weights, check_layout
from jaxattn.analysis.words import WordMap, align_words, word_level_attention
from jaxattn.capture import Capture
from jaxattn.inputs.conllu import Sentence

DIRECTIONS = ("dep_to_head", "head_to_dep")


def attention_argmax(word_weights: np.ndarray, word_map: WordMap) -> np.ndarray:
    """Each unit's most-attended other word (Clark et al.'s head prediction).

    Args:
      word_weights: [..., U, U] word-level weights.
      word_map: the map they were built with (special units are excluded).

    Returns:
      [..., U] int: the unit index of the predicted word; -1 where a row has no
      candidate (a one-word sentence).
    """
    u = word_weights.shape[-1]
    allowed = np.broadcast_to(word_map.unit_word >= 0, (u, u)) & ~np.eye(u, dtype=bool)
    scores = np.where(allowed, word_weights, -np.inf)
    pred = scores.argmax(-1)
    return np.where(allowed.any(-1), pred, -1)


def best_offset(offsets: collections.Counter) -> tuple[int, int]:
    """(k, arcs at offset k): the most common head - dependent (ties: smaller |k|, then k < 0)."""
    k, n = min(offsets.items(), key=lambda kv: (-kv[1], abs(kv[0]), kv[0]))
    return int(k), int(n)


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
    """

    def __init__(
        self,
        kind: str = "attention",
        coarse: bool = False,
        specials: SpecialTokens | None = None,
        strict: bool = False,
    ):
        self.kind, self.coarse, self.specials, self.strict = kind, coarse, specials, strict
        self.layout: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        self._correct: dict[str, np.ndarray] = {}  # rel -> [2, L, H]
        self._count: collections.Counter = collections.Counter()
        self._offsets: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.sentences = 0
        self.skipped = 0
        self.skip_reasons: list[str] = []

    def update(self, capture: Capture, sentence: Sentence) -> None:
        """Add one parsed sentence and its capture.

        Raises:
          ValueError: the tokens do not align to the words (only when strict).
        """
        self.layout = check_layout(self.layout, capture)
        specials = self.specials or detect_specials(capture.tokens)
        try:
            wmap = align_words(capture.tokens, sentence.words, specials)
        except ValueError as e:
            if self.strict:
                raise
            self.skipped += 1
            if len(self.skip_reasons) < 5:
                self.skip_reasons.append(f"{sentence.sent_id or self.sentences}: {e}")
            return
        ww = word_level_attention(capture_weights(capture, self.kind), wmap)
        pred = attention_argmax(ww, wmap)  # [L, H, U]
        unit = wmap.word_units()
        has_tokens = np.isin(np.arange(len(sentence.words)), wmap.unit_word[wmap.unit_word >= 0])
        for dep, head, rel in sentence.arcs(self.coarse):
            if not (has_tokens[dep] and has_tokens[head]):
                continue  # a word with no piece (empty after normalising) cannot be predicted
            du, hu = unit[dep], unit[head]
            hits = np.stack([pred[..., du] == hu, pred[..., hu] == du])
            self._correct[rel] = self._correct.get(rel, 0) + hits
            self._count[rel] += 1
            self._offsets[rel][head - dep] += 1
        self.sentences += 1

    def accuracies(self) -> dict[str, np.ndarray]:
        """relation -> [2, L, H] accuracy per (direction, layer, head); direction as DIRECTIONS."""
        return {rel: self._correct[rel] / self._count[rel] for rel in self._count}

    def result(self) -> dict[str, dict]:
        """The report.json ``dependency_heads`` table, relations by decreasing count.

        Returns:
          {relation: {"best_head": [layer, head], "direction": "dep_to_head" |
          "head_to_dep", "accuracy": float, "baseline_offset": int,
          "baseline_accuracy": float, "count": int}}, layer and head being the
          capture's 0-indexed layer and head numbers.
        """
        if self.layout is None:
            return {}
        layers, heads = self.layout
        out = {}
        for rel, count in sorted(self._count.items(), key=lambda kv: (-kv[1], kv[0])):
            acc = self._correct[rel] / count  # [2, L, H]
            # Flatten in (layer, head, direction) order so ties go to the lowest layer/head.
            flat = acc.transpose(1, 2, 0).reshape(-1)
            li, hi, di = np.unravel_index(int(flat.argmax()), acc.transpose(1, 2, 0).shape)
            k, n = best_offset(self._offsets[rel])
            out[rel] = {
                "best_head": [int(layers[li]), int(heads[hi])],
                "direction": DIRECTIONS[di],
                "accuracy": float(flat.max()),
                "baseline_offset": k,
                "baseline_accuracy": n / count,
                "count": int(count),
            }
        return out
