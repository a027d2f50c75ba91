"""Word-level attention from word-piece attention (Clark et al. 2019, section 4.1).

A `WordMap` assigns every token to a *unit*: a word, or (by default) a special
token kept as its own unit, as Clark et al.'s code keeps [CLS] and [SEP]. Build
one from the token strings alone (`group_words`) or against given words, such as
a CoNLL-U sentence's FORM column (`align_words`).
"""

from __future__ import annotations

import codecs
import dataclasses
from collections.abc import Sequence

import numpy as np

from jaxattn.analysis.tokens import (
    WORDPIECE,
    SpecialTokens,
    detect_specials,
    is_punctuation,
    normalise_text,
    piece_bytes,
    starts_word,
)
from jaxattn.analysis.weights import square_maps
from jaxattn.errors import InputError, UsageError


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class WordMap:
    """Tokens -> units (words, and special tokens kept as their own units).

    Attributes:
      units: one label per unit, in the order of their first token (given words
        that no piece covered come last): the word's text, or the special token.
      token_unit: [T] int, the unit of each token; -1 for a token in no unit (a
        special token when specials are dropped).
      unit_word: [U] int, the index of each unit in the given word list
        (`align_words`) or among the non-special units (`group_words`); -1 for a
        special-token unit.
    """

    units: tuple[str, ...]
    token_unit: np.ndarray
    unit_word: np.ndarray

    @property
    def num_units(self) -> int:
        return len(self.units)

    def membership(self) -> np.ndarray:
        """[U, T] float64: 1 where token t belongs to unit u."""
        m = np.zeros((self.num_units, len(self.token_unit)))
        t = np.flatnonzero(self.token_unit >= 0)
        m[self.token_unit[t], t] = 1.0
        return m

    def word_units(self) -> np.ndarray:
        """[W] int: the unit of each given word (indexable by word index)."""
        out = np.full(int(self.unit_word.max(initial=-1)) + 1, -1, int)
        u = np.flatnonzero(self.unit_word >= 0)
        out[self.unit_word[u]] = u
        return out


# How the row of a split word is made from its pieces' rows (`word_level_attention`).
# "mean" is what Clark et al. 2019 state (section 4.1) and the default here; "first"
# is the default of their released code (bpe_utils.get_word_word_attention, mode="first").
WORD_ROWS = ("mean", "first")


def word_level_attention(weights: np.ndarray, word_map: WordMap, rows: str = "mean") -> np.ndarray:
    """Word-level attention of Clark et al. 2019 (section 4.1, "Attention to words").

    Attention *to* a unit is the sum of the attention to its pieces. Attention
    *from* a unit is, with ``rows="mean"`` (the paper's definition), the mean
    over its pieces of their (word-level) rows,
    ``W[u, v] = mean_{i in u} sum_{j in v} A[i, j]``; with ``rows="first"``
    (the released code's default), the row of its first piece,
    ``W[u, v] = sum_{j in v} A[first(u), j]``. Rows of units that got all
    tokens of the map stay probability rows; columns of tokens in no unit are
    dropped (those rows then sum to less than 1); a unit with no tokens gets a
    zero row and column.

    Args:
      weights: [..., T, T] token-level weights (e.g. attention [L, H, T, T]).
      word_map: the token -> unit map of the same example.
      rows: "mean" or "first" (`WORD_ROWS`).

    Returns:
      [..., U, U] float64.

    Raises:
      UsageError: an unknown `rows`, weights that are not [..., T, T] maps
        (`weights.square_maps`: selected query rows gave [..., U, U] silently), or
        over another count of tokens than the map's.
    """
    if rows not in WORD_ROWS:
        raise UsageError(f"rows must be one of {WORD_ROWS}, not {rows!r}")
    weights = square_maps(weights)
    m = word_map.membership()  # [U, T]
    if weights.shape[-1] != m.shape[1]:
        raise UsageError(f"weights have {weights.shape[-1]} tokens, the word map {m.shape[1]}")
    counts = m.sum(1, keepdims=True)
    if rows == "mean":
        pick = np.divide(m, counts, out=np.zeros_like(m), where=counts > 0)
    else:  # one-hot on each unit's first token (argmax: the first 1)
        pick = np.zeros_like(m)
        has = counts[:, 0] > 0
        pick[np.flatnonzero(has), m[has].argmax(1)] = 1.0
    to_units = weights @ m.T  # [..., T, U]
    return np.einsum("ut,...tv->...uv", pick, to_units)


def group_words(
    tokens: Sequence[str], specials: SpecialTokens | None = None, keep_specials: bool = True
) -> WordMap:
    """Group pieces into words from the token strings alone.

    A new word starts at the first piece after a special token, at a piece the
    scheme marks as word-initial (WordPiece: no ``##``; BPE: ``Ġ``), and, for
    BPE, where this or the previous piece is all punctuation (so "store," is two
    words, as BERT's punctuation split makes it). Special tokens become their own
    units (`keep_specials`, as Clark et al.) or belong to none.
    """
    sp = specials or detect_specials(tokens)
    units: list[str] = []
    token_unit = np.full(len(tokens), -1, int)
    unit_word: list[int] = []
    prev: str | None = None  # text of the previous piece; None after a special
    n_words = 0
    for i, tok in enumerate(tokens):
        if tok in sp.all:
            if keep_specials:
                units.append(tok)
                unit_word.append(-1)
                token_unit[i] = len(units) - 1
            prev = None
            continue
        text = piece_bytes(tok, sp.scheme).decode("utf-8", errors="replace")
        new = prev is None or starts_word(tok, sp.scheme)
        if sp.scheme != WORDPIECE:
            new = new or is_punctuation(text) or is_punctuation(prev or "")
        if new:
            units.append(text)
            unit_word.append(n_words)
            n_words += 1
        else:
            units[-1] += text
        token_unit[i] = len(units) - 1
        prev = text
    return WordMap(units=tuple(units), token_unit=token_unit, unit_word=np.array(unit_word, int))


def align_words(
    tokens: Sequence[str],
    words: Sequence[str],
    specials: SpecialTokens | None = None,
    keep_specials: bool = True,
) -> WordMap:
    """Align pieces to given words (e.g. CoNLL-U FORMs) by consuming normalised characters.

    Both sides are normalised by `normalise_text` (lowercase, accents stripped
    as BERT-uncased does, spaces dropped); pieces lose their ``##`` / ``Ġ``
    marker (byte-level pieces are decoded to text first). Each piece is assigned
    to the word holding its first character and consumes its characters, so a
    piece that crossed a word boundary goes to the word it starts in. An unknown
    token ([UNK]) consumes characters up to where the next piece matches.
    Special tokens become their own units (`keep_specials`) or belong to none.
    Tokenise the words joined by single spaces (as Clark et al. do) so that no
    piece crosses a word boundary.

    Raises:
      InputError: a piece does not match the words' next characters, or the
        pieces do not cover every character of the words.
    """
    sp = specials or detect_specials(tokens)
    word_text = [normalise_text(w) for w in words]
    flat = "".join(word_text)
    owner = np.repeat(np.arange(len(words)), [len(w) for w in word_text])
    unit_of_word = np.full(len(words), -1, int)
    units: list[str] = []
    unit_word: list[int] = []
    token_unit = np.full(len(tokens), -1, int)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pos, pending_unk = 0, []

    def unit_at(p: int) -> int:
        if not len(flat):
            raise InputError(None, "the words have no characters to align the tokens to")
        w = int(owner[min(p, len(flat) - 1)])
        if unit_of_word[w] < 0:
            unit_of_word[w] = len(units)
            units.append(words[w])
            unit_word.append(w)
        return int(unit_of_word[w])

    for i, tok in enumerate(tokens):
        if tok in sp.all:
            if keep_specials:
                units.append(tok)
                unit_word.append(-1)
                token_unit[i] = len(units) - 1
            continue
        if tok in sp.unknown:
            token_unit[i] = unit_at(pos)
            pending_unk.append(i)
            pos += 1  # an unknown token stands for at least one character
            continue
        text = normalise_text(decoder.decode(piece_bytes(tok, sp.scheme)))
        if pending_unk and text:
            found = flat.find(text, pos)
            if found < 0:
                raise InputError(None, f"token {i} {tok!r}: not found after an unknown token")
            pos, pending_unk = found, []
        if flat[pos : pos + len(text)] != text:
            raise InputError(
                None,
                f"token {i} {tok!r} does not match the words at character {pos}: "
                f"{flat[pos : pos + len(text) + 5]!r}",
            )
        token_unit[i] = unit_at(pos)
        pos += len(text)
    if pending_unk:
        pos = len(flat)
    if pos != len(flat):
        raise InputError(None, f"the tokens cover {pos} of the words' {len(flat)} characters")
    for w in np.flatnonzero(unit_of_word < 0):  # words with no piece (empty after normalising)
        unit_of_word[w] = len(units)
        units.append(words[w])
        unit_word.append(int(w))
    return WordMap(units=tuple(units), token_unit=token_unit, unit_word=np.array(unit_word, int))
