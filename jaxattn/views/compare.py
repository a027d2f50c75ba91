"""Two captures of the same texts, side by side: pairing, word alignment, differences (numpy).

    pairs = [pair_example(i, a, b, "attention", "norm") for i, (a, b) in enumerate(zip(A, B))]
    pairs[0].a, pairs[0].b          # [L, H, U, U] float64, U tokens (or words)
    pairs[0].mean_abs               # [L, H]: mean over cells of |B - A|
    pairs[0].js                     # [L, H]: Jensen-Shannon distance per row, averaged

Two decoders' captures (`Pair.causal`) are summarised over what their rows see:
the cells j <= i (of rows 1 .. U-1 token by token).

Example i of A is paired with example i of B. Same token sequences: compared
token by token. Different token sequences of the same text (two tokenisers):
compared at the word level with Clark et al.'s convention
(`word_level_attention`: sum over the pieces of a key unit, mean over the
pieces of a query unit) on the coarsest segmentation both tokenisations share
(`common_units`): each side's pieces are grouped into words (`group_words`),
and a unit is a maximal span of characters where both sides have a word
boundary, so A's words that B runs together (BERT "aren ' t" against RoBERTa
"Ġaren 't") become one unit "aren't", and every unit has pieces on both sides.
Special tokens are left out on both sides (tokenisers put different ones in
different places), so a word-level row sums to the weight on words only. The
page (`jaxattn.views.compare_page`) says which level it compares at.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from jaxattn.analysis.tokens import (
    detect_specials,
    display_tokens,
    normalise_text,
    piece_bytes,
    readable_text,
)
from jaxattn.analysis.weights import KINDS, WEIGHT_KINDS, capture_weights, normalise_rows
from jaxattn.analysis.words import WordMap, align_words, group_words, word_level_attention
from jaxattn.capture import Capture
from jaxattn.errors import UsageError
from jaxattn.progress import counted
from jaxattn.selection import resolve_indices
from jaxattn.views.causal import is_causal

# weight kind of a side (`jaxattn.analysis.weights.KINDS`) -> its title on the page
KIND_TITLES = {kind: k.title for kind, k in KINDS.items()}
LEVELS = ("token", "word")


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Pair:
    """One example of A and of B on common rows and columns.

    Attributes:
      tokens: the display labels of the U rows/columns (tokens, or the common word
        units, spelled with A's pieces: `common_units`).
      level: "token" or "word" (see the module docstring).
      a, b: [L, H, U, U] float64 weights of A and B.
      layers, heads: the layer and head indices of axes 0 and 1.
      sentence_b_start: the first row of sentence B (token level), else None.
      text: the example's text in words (for labels and messages).
      causal: both sides are a decoder's (`is_causal`): row i sees columns j <= i only,
        so the summaries leave out what no side can differ on, the cells j > i (0 on
        both sides) and, token by token, row 0 (all its weight on column 0 on both).
    """

    tokens: tuple[str, ...]
    level: str
    a: np.ndarray
    b: np.ndarray
    layers: tuple[int, ...]
    heads: tuple[int, ...]
    sentence_b_start: int | None
    text: str
    causal: bool = False

    @property
    def diff(self) -> np.ndarray:
        """[L, H, U, U]: B - A."""
        return self.b - self.a

    def _rows(self) -> np.ndarray:
        """[U] booleans: the rows the summaries average (a causal pair's from row 1 on at
        the token level; a first word of several pieces can differ)."""
        rows = np.ones(self.a.shape[-1], bool)
        if self.causal and self.level == "token" and rows.size > 1:
            rows[0] = False
        return rows

    @property
    def mean_abs(self) -> np.ndarray:
        """[L, H]: the mean of |B - A| over all U x U cells of each head (a causal pair's:
        over the cells j <= i of rows 1 .. U-1)."""
        d = np.abs(self.diff)
        if not self.causal:
            return d.mean((-2, -1))
        u = d.shape[-1]
        cells = np.tril(np.ones((u, u), bool)) & self._rows()[:, None]
        return d[..., cells].mean(-1)

    @property
    def max_abs(self) -> np.ndarray:
        """[L, H]: the largest |B - A| of each head (the difference map's colour scale)."""
        return np.abs(self.diff).max((-2, -1))

    @property
    def js(self) -> np.ndarray:
        """[L, H]: `js_distance` of each row, averaged over the rows (a causal pair's:
        rows 1 .. U-1)."""
        return js_distance(self.a, self.b)[..., self._rows()].mean(-1)


def js_distance(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Jensen-Shannon distance (base 2, in [0, 1]) between matching rows of `p` and `q`.

    Rows are normalised to sum to 1 first (word-level rows without special tokens
    sum to less); a row that is all zero on either side counts as distance 0.

    Args:
      p, q: [..., R, C] non-negative weights.

    Returns:
      [..., R] float64: sqrt(JSD(p_r, q_r)).
    """
    p, q = normalise_rows(p), normalise_rows(q)
    m = (p + q) / 2

    def kl(x):
        ratio = np.divide(x, m, out=np.ones_like(x), where=x > 0)
        return (x * np.log2(ratio)).sum(-1)

    jsd = np.clip((kl(p) + kl(q)) / 2, 0.0, 1.0)
    valid = (p.sum(-1) > 0) & (q.sum(-1) > 0)
    return np.where(valid, np.sqrt(jsd), 0.0)


def shorten(text: str, n: int = 50) -> str:
    """`text` cut to `n` characters with an ellipsis."""
    return text if len(text) <= n else text[: n - 1] + "…"


def example_text(cap: Capture) -> str:
    """The capture's text (a pair as 'A ||| B'), else its tokens as readable text."""
    if cap.text is None:
        return readable_text(cap.tokens)
    return cap.text if isinstance(cap.text, str) else " ||| ".join(cap.text)


def _words(tokens: Sequence[str]) -> WordMap:
    return group_words(tokens, keep_specials=False)


def check_same_text(index: int, a: Capture, b: Capture) -> None:
    """UsageError unless A and B are captures of the same text (case, accents and spaces
    aside): their texts when both know them, else the characters of their words."""
    if tuple(a.tokens) == tuple(b.tokens):
        return
    if a.text is not None and b.text is not None:
        same = normalise_text(example_text(a)) == normalise_text(example_text(b))
    else:
        chars = [normalise_text("".join(_words(c.tokens).units)) for c in (a, b)]
        same = chars[0] == chars[1]
    if not same:
        raise UsageError(
            f"example {index} differs between A and B: A is {shorten(example_text(a))!r}, B is "
            f"{shorten(example_text(b))!r}: compare captures of the same texts, in the same order"
        )


def _starts(tokens: Sequence[str], chars: list[str]) -> np.ndarray:
    """[T] int: the index in `chars` of the character each non-special token starts at
    (-1: a special token), by `align_words` against the characters as one-letter words."""
    m = align_words(tokens, chars, keep_specials=False)
    return np.where(m.token_unit >= 0, m.unit_word[np.maximum(m.token_unit, 0)], -1)


def _spell(ta: Sequence[str], tb: Sequence[str]) -> tuple[list[str], list[np.ndarray]]:
    """(the text's normalised characters, each side's `_starts`), spelled by A, else by B
    (so that an [UNK] on one side is aligned against the other side's characters)."""
    error = None
    for tokens in (ta, tb):
        chars = list(normalise_text(readable_text(tokens)))
        try:
            return chars, [_starts(ta, chars), _starts(tb, chars)]
        except ValueError as e:
            error = error or e
    raise error


def common_units(ta: Sequence[str], tb: Sequence[str]) -> tuple[tuple[str, ...], WordMap, WordMap]:
    """(unit labels, A's and B's token -> unit maps) on the coarsest common segmentation.

    Each side's pieces are grouped into words (`group_words`, specials left
    out); a unit is a maximal span of characters where both sides have a word
    boundary (the start of a word on each side), so every unit holds whole words
    of A and whole words of B, at least one of each. A unit is labelled with the
    text of A's pieces in it.

    Raises:
      ValueError: the two sides do not spell the same characters (`align_words`).
    """
    chars, starts = _spell(ta, tb)
    maps = [_words(t) for t in (ta, tb)]
    firsts = []
    for m, st in zip(maps, starts, strict=True):
        first = np.full(m.num_units, len(chars), int)
        on = m.token_unit >= 0
        np.minimum.at(first, m.token_unit[on], st[on])
        firsts.append(first)
    common = sorted(set(firsts[0].tolist()) & set(firsts[1].tolist())) or [0]
    word_unit = [np.maximum(np.searchsorted(common, f, side="right") - 1, 0) for f in firsts]
    token_unit = [
        np.where(m.token_unit >= 0, wu[np.maximum(m.token_unit, 0)], -1)
        for m, wu in zip(maps, word_unit, strict=True)
    ]
    spelled = [b""] * len(common)  # A's pieces of each unit, decoded together
    scheme = detect_specials(ta).scheme
    for tok, u in zip(ta, token_unit[0].tolist(), strict=True):
        spelled[u] += piece_bytes(tok, scheme) if u >= 0 else b""
    labels = tuple(x.decode("utf-8", errors="replace") for x in spelled)
    units = np.arange(len(common))
    return labels, *(WordMap(units=labels, token_unit=t, unit_word=units) for t in token_unit)


def word_matrices(wa: np.ndarray, ta: Sequence[str], wb: np.ndarray, tb: Sequence[str]):
    """(unit labels, [..., U, U] of A, [..., U, U] of B) on `common_units`.

    Raises:
      ValueError: A's and B's pieces do not spell the same characters.
    """
    labels, map_a, map_b = common_units(ta, tb)
    return labels, *(word_level_attention(w, m) for w, m in ((wa, map_a), (wb, map_b)))


def select(cap: Capture, w: np.ndarray, layers, heads):
    """(w restricted to the --layers/--heads selections, layers, heads) of a saved capture.

    Raises:
      UsageError: a selected layer or head the capture does not hold.
    """
    config = cap.provenance.get("config") or {}
    picked = []
    for axis, (sel, have, key) in enumerate(
        ((layers, cap.layers, "layers"), (heads, cap.heads, "heads"))
    ):
        count = int(config.get(f"num_{key}") or max(have) + 1)
        chosen = resolve_indices(sel, count, key) if sel is not None else tuple(have)
        missing = [i for i in chosen if i not in have]
        if missing:
            raise UsageError(f"--{key} {missing}: not in the saved capture (it holds {list(have)})")
        w = np.take(w, [list(have).index(i) for i in chosen], axis=axis)
        picked.append(tuple(int(i) for i in chosen))
    return w, picked[0], picked[1]


def pair_example(
    index: int, a: Capture, b: Capture, qa: str, qb: str, layers=None, heads=None
) -> Pair:
    """Example `index` of A and B as a `Pair`: weights of kind `qa` / `qb`
    ("attention" or "norm"), on the --layers/--heads selections (None: as captured).

    Raises:
      UsageError: different texts, a missing quantity, or other layer/head shapes.
    """
    check_same_text(index, a, b)
    sides = []
    for name, cap, q in (("A", a, qa), ("B", b, qb)):
        if WEIGHT_KINDS[q] not in cap.tensors:
            raise UsageError(
                f"{name} holds {', '.join(cap.what)}; kind={q} needs {WEIGHT_KINDS[q]}"
            )
        sides.append(select(cap, capture_weights(cap, q), layers, heads))
    (wa, la, ha), (wb, lb, hb) = sides
    if (la, ha) != (lb, hb):
        raise UsageError(
            f"A holds {counted(len(la), 'layer')} x {counted(len(ha), 'head')} "
            f"({list(la)} x {list(ha)}), B "
            f"{len(lb)} x {len(hb)} ({list(lb)} x {list(hb)}): compare a common selection "
            "with --layers/--heads"
        )
    text = example_text(a)
    if tuple(a.tokens) == tuple(b.tokens):
        tokens, level, start = display_tokens(a.tokens), "token", a.sentence_b_start
    else:
        try:
            tokens, wa, wb = word_matrices(wa, a.tokens, wb, b.tokens)
        except ValueError as e:
            raise UsageError(
                f"example {index}: A's and B's tokens do not spell the same characters ({e})"
            ) from e
        level, start = "word", None
    return Pair(
        tokens=tuple(tokens),
        level=level,
        a=np.asarray(wa, np.float64),
        b=np.asarray(wb, np.float64),
        layers=la,
        heads=ha,
        sentence_b_start=start,
        text=text,
        causal=is_causal(a) and is_causal(b),
    )


def pair_all(
    caps_a: Sequence[Capture], caps_b: Sequence[Capture], qa: str, qb: str, layers=None, heads=None
) -> list[Pair]:
    """`pair_example` of every index (UsageError: A and B hold different counts)."""
    if len(caps_a) != len(caps_b):
        raise UsageError(
            f"A holds {len(caps_a)} examples, B {len(caps_b)}: compare captures of the same "
            "texts (--limit N compares the first N of each)"
        )
    return [
        pair_example(i, a, b, qa, qb, layers, heads)
        for i, (a, b) in enumerate(zip(caps_a, caps_b, strict=True))
    ]
