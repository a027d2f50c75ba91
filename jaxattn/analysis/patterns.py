"""Attention-map pattern classes by fixed rules (Kovaleva et al. 2019; Vig 2019).

Kovaleva et al. sorted maps into five classes with a classifier trained on 400
hand-labelled maps; here each class is a rule on one map W [T, S] (no
training), with the thresholds below. Cells (i, j) fall into:

- *vertical* cells: column j is a vertical column (a special token, or a stripe:
  a column whose mean over rows is at least `STRIPE_MIN`) and |i - j| > 1;
- *diagonal* cells: |i - j| <= 1 and column j is not vertical;
- *ambiguous* cells: |i - j| <= 1 on a vertical column (a token next to [SEP]
  attending to it reads as either).

A cell set X has mass ``m_X = mean_i sum_{j: (i,j) in X} W[i, j]`` and chance
``c_X`` = the mass a uniform map would give it; ``kappa_X = (m_X - c_X) / (1 -
c_X)`` is its excess over chance (0 for a uniform map, 1 for all mass in X).

Kovaleva classes (exactly one per map), in order:
1. structured if kappa of vertical+diagonal+ambiguous cells >= `STRUCTURED_MIN`:
   "vertical+diagonal" if both the vertical and the diagonal mass are at least
   `MIXED_PART_MIN`, else "vertical" or "diagonal", whichever mass is larger;
2. "block" for a sentence pair if kappa of the within-sentence cells (the
   segments [0, b) and [b, T), b = sentence_b_start) >= `BLOCK_MIN`;
3. "heterogeneous" otherwise.

Vig's patterns (any number per map; each computed over the rows of non-special
tokens, "words" below, and over all rows for "delimiter"):
- "next_word" / "previous_word": mean W[i, i+1] / W[i, i-1] >= `VIG_POSITION_MIN`;
- "identical_word": over words whose piece (marker stripped, lowercased; specials
  and punctuation excluded) recurs elsewhere in its own sentence, the mean mass
  on those other occurrences >= `VIG_IDENTICAL_MIN`;
- "other_sentence_word": the same for occurrences in the other sentence of a pair;
- "delimiter": mean mass on [CLS] and [SEP] >= `VIG_DELIMITER_MIN`;
- "bag_of_words": mean over words of H(W[i]) / ln(n_i) >= `VIG_BAG_MIN`, n_i the
  length of the word's own sentence segment (the whole input for one sentence).
Vig's "related words" and "words predictive of a word" need meaning, not a rule:
not detected.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxattn.analysis.head_stats import row_entropy
from jaxattn.analysis.tokens import SpecialTokens, detect_specials, strip_piece, token_masks
from jaxattn.analysis.weights import capture_weights, check_layout, token_maps
from jaxattn.capture import Capture
from jaxattn.errors import UsageError

STRIPE_MIN = 0.3
"""A non-special column whose mean attention over rows is at least this is a vertical stripe."""
STRUCTURED_MIN = 0.5
"""Least kappa (excess over chance) of the vertical+diagonal+ambiguous cells for those classes."""
MIXED_PART_MIN = 0.2
"""Least vertical and least diagonal mass for "vertical+diagonal" rather than one of them."""
BLOCK_MIN = 0.6
"""Least kappa of within-sentence cells for "block" (sentence pairs only)."""
VIG_POSITION_MIN = 0.5
"""Least mean attention to the next / previous token for Vig's next / previous word."""
VIG_IDENTICAL_MIN = 0.5
"""Least mean mass on other occurrences of the same piece for Vig's identical-word patterns."""
VIG_DELIMITER_MIN = 0.5
"""Least mean mass on [CLS] and [SEP] for Vig's delimiter-focused pattern."""
VIG_BAG_MIN = 0.8
"""Least mean normalised row entropy H / ln(segment length) for Vig's bag of words."""

KOVALEVA_CLASSES = ("vertical", "diagonal", "vertical+diagonal", "block", "heterogeneous")
VIG_PATTERNS = (
    "next_word",
    "previous_word",
    "identical_word",
    "other_sentence_word",
    "delimiter",
    "bag_of_words",
)


def _mass(w: np.ndarray, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # cells broadcast against w [L, H, T, S]; returns (mass, chance), both [L, H]
    cells = np.broadcast_to(cells, w.shape)
    return (w * cells).sum(-1).mean(-1), cells.sum(-1).mean(-1) / w.shape[-1]


def _kappa(mass: np.ndarray, chance: np.ndarray) -> np.ndarray:
    room = 1.0 - chance
    return np.divide(mass - chance, room, out=np.zeros_like(mass), where=room > 1e-12)


def _segments(t: int, sentence_b_start: int | None) -> np.ndarray:
    seg = np.zeros(t, int)
    if sentence_b_start is not None:
        seg[sentence_b_start:] = 1
    return seg


def kovaleva_classes(
    weights: np.ndarray,
    tokens: Sequence[str],
    sentence_b_start: int | None,
    specials: SpecialTokens | None = None,
) -> np.ndarray:
    """Kovaleva et al. 2019's class of each map, by the rules of the module docstring.

    Args:
      weights: [L, H, T, T] maps of one example.
      tokens: its T tokens; sentence_b_start: as in `Capture`.
      specials: special-token strings; detected from `tokens` when None.

    Returns:
      [L, H] int: indices into `KOVALEVA_CLASSES`.
    Raises:
      UsageError: weights that are not [..., T, T] maps over the T tokens
        (`jaxattn.analysis.weights.token_maps`).
    """
    w = token_maps(weights, tokens)
    t = w.shape[-1]
    special = token_masks(tokens, specials or detect_specials(tokens))["special"]
    idx = np.arange(t)
    band = np.abs(idx[:, None] - idx[None, :]) <= 1  # [T, S]
    vcol = special | (w.mean(-2) >= STRIPE_MIN)  # [L, H, S]
    vcol = vcol[..., None, :]
    m_v, _ = _mass(w, vcol & ~band)
    m_d, _ = _mass(w, ~vcol & band)
    m_all, c_all = _mass(w, vcol | band)
    seg = _segments(t, sentence_b_start)
    m_blk, c_blk = _mass(w, seg[:, None] == seg[None, :])
    out = np.full(w.shape[:-2], KOVALEVA_CLASSES.index("heterogeneous"))
    if sentence_b_start is not None:
        out[_kappa(m_blk, c_blk) >= BLOCK_MIN] = KOVALEVA_CLASSES.index("block")
    mixed = (m_v >= MIXED_PART_MIN) & (m_d >= MIXED_PART_MIN)
    one = np.where(
        m_v >= m_d, KOVALEVA_CLASSES.index("vertical"), KOVALEVA_CLASSES.index("diagonal")
    )
    kind = np.where(mixed, KOVALEVA_CLASSES.index("vertical+diagonal"), one)
    return np.where(_kappa(m_all, c_all) >= STRUCTURED_MIN, kind, out)


def vig_patterns(
    weights: np.ndarray,
    tokens: Sequence[str],
    sentence_b_start: int | None,
    specials: SpecialTokens | None = None,
) -> dict[str, np.ndarray]:
    """Vig 2019's rule-detectable patterns of each map (module docstring).

    Returns:
      pattern -> [L, H] bool, for every name in `VIG_PATTERNS`.
    Raises:
      UsageError: weights that are not [..., T, T] maps over the T tokens
        (`jaxattn.analysis.weights.token_maps`).
    """
    w = token_maps(weights, tokens)
    t = w.shape[-1]
    sp = specials or detect_specials(tokens)
    masks = token_masks(tokens, sp)
    word = ~masks["special"]
    seg = _segments(t, sentence_b_start)
    zero = np.zeros(w.shape[:-2], bool)

    def mean_rows(values: np.ndarray, rows: np.ndarray) -> np.ndarray:  # [L,H,T] -> [L,H]
        return values[..., rows].mean(-1) if rows.any() else np.zeros(w.shape[:-2])

    nxt = np.zeros(w.shape[:-1])
    nxt[..., :-1] = np.diagonal(w, 1, -2, -1)
    prv = np.zeros(w.shape[:-1])
    prv[..., 1:] = np.diagonal(w, -1, -2, -1)
    out = {
        "next_word": mean_rows(nxt, word & (np.arange(t) < t - 1)) >= VIG_POSITION_MIN,
        "previous_word": mean_rows(prv, word & (np.arange(t) > 0)) >= VIG_POSITION_MIN,
    }
    keys = np.array([strip_piece(tok, sp.scheme).lower() for tok in tokens])
    content = word & ~masks["punct"]
    same = keys[:, None] == keys[None, :]
    same &= content[:, None] & content[None, :] & ~np.eye(t, dtype=bool)
    for name, where in (
        ("identical_word", seg[:, None] == seg[None, :]),
        ("other_sentence_word", seg[:, None] != seg[None, :]),
    ):
        cells = same & where
        rows = cells.any(-1)
        if not rows.any():
            out[name] = zero
            continue
        out[name] = mean_rows((w * cells).sum(-1), rows) >= VIG_IDENTICAL_MIN
    delim = masks["cls"] | masks["sep"]
    out["delimiter"] = w[..., delim].sum(-1).mean(-1) >= VIG_DELIMITER_MIN
    seg_len = np.bincount(seg)[seg]  # [T]
    norm_entropy = row_entropy(w) / np.log(np.maximum(seg_len, 2))
    out["bag_of_words"] = mean_rows(norm_entropy, word) >= VIG_BAG_MIN
    return {name: out[name] for name in VIG_PATTERNS}


class PatternCounts:
    """Streams per-layer pattern fractions over a corpus.

    For each layer, the fraction of (example, head) maps in each Kovaleva class
    (the five fractions sum to 1) and with each Vig pattern (each in [0, 1],
    independent).

    Args:
      kind: weight kind, "attention" (as the papers) or "norm".
      specials: special-token strings; detected per example when None.
    """

    def __init__(self, kind: str = "attention", specials: SpecialTokens | None = None):
        self.kind = kind
        self.specials = specials
        self.layout: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        self._counts: dict[str, np.ndarray] = {}
        self.maps_per_layer = 0

    def update(self, capture: Capture) -> None:
        """Add one example."""
        self.layout = check_layout(self.layout, capture)
        w = capture_weights(capture, self.kind)
        args = (w, capture.tokens, capture.sentence_b_start, self.specials)
        classes = kovaleva_classes(*args)
        found = {name: classes == i for i, name in enumerate(KOVALEVA_CLASSES)}
        found.update(vig_patterns(*args))
        for name, hit in found.items():
            self._counts[name] = self._counts.get(name, 0) + hit.sum(-1)
        self.maps_per_layer += w.shape[1]

    def result(self) -> dict[str, np.ndarray]:
        """{pattern: [L] fraction} for every Kovaleva class and Vig pattern."""
        if not self.maps_per_layer:
            raise UsageError("PatternCounts saw no example")
        return {
            name: self._counts[name] / self.maps_per_layer
            for name in (*KOVALEVA_CLASSES, *VIG_PATTERNS)
        }
