"""Token strings: special tokens, word-piece schemes and the normalisation used to align.

Two tokenisation schemes are recognised from the token strings alone:

- ``"wordpiece"`` (BERT, DistilBERT, MiniLM): a piece that continues a word starts
  with ``##``; specials are ``[CLS]`` / ``[SEP]``.
- ``"bpe"`` (RoBERTa byte-level BPE): a piece that starts a new space-separated
  word starts with ``Ġ`` (the byte-level image of a space); other bytes are
  mapped to printable characters by GPT-2's ``bytes_to_unicode`` table, so
  ``é`` appears as ``Ã©``; specials are ``<s>`` / ``</s>``.
"""

from __future__ import annotations

import dataclasses
import functools
import unicodedata
from collections.abc import Sequence

import numpy as np

WORDPIECE = "wordpiece"
BPE = "bpe"
_CONTINUATION = "##"  # WordPiece: this piece continues the previous word
_SPACE = "Ġ"  # byte-level BPE: this piece follows a space
_DROPPED = frozenset({"Mn", "Cc", "Cf"})  # accents, control and format characters


@dataclasses.dataclass(frozen=True, kw_only=True)
class SpecialTokens:
    """The strings that mark a tokenizer's special and punctuation tokens.

    Attributes:
      cls: the sequence-start token ([CLS] in BERT, <s> in RoBERTa).
      sep: the separator / sequence-end token ([SEP] in BERT, </s> in RoBERTa).
      others: further tokens treated as special (never words): pad, mask, unk
        of either family. Only ``cls`` and ``sep`` have their own statistics.
      unknown: the unknown-word tokens; they stand for (part of) a word, so they
        are not special: alignment lets one consume the characters up to where
        the next piece matches.
      punctuation: the tokens counted as punctuation by Clark et al. 2019
        (periods and commas), compared after `strip_piece`.
      scheme: "wordpiece" or "bpe" (see the module docstring).
    """

    cls: str = "[CLS]"
    sep: str = "[SEP]"
    others: frozenset[str] = frozenset({"[PAD]", "[MASK]", "<pad>", "<mask>"})
    unknown: frozenset[str] = frozenset({"[UNK]", "<unk>"})
    punctuation: frozenset[str] = frozenset({".", ","})
    scheme: str = WORDPIECE

    @property
    def all(self) -> frozenset[str]:
        """Every special token string."""
        return frozenset({self.cls, self.sep}) | self.others


BERT_SPECIALS = SpecialTokens()
ROBERTA_SPECIALS = SpecialTokens(cls="<s>", sep="</s>", scheme=BPE)


def detect_specials(tokens: Sequence[str]) -> SpecialTokens:
    """The special-token preset that matches `tokens`.

    RoBERTa's (`ROBERTA_SPECIALS`) when the sequence starts with ``<s>`` or any
    piece carries the byte-level space marker ``Ġ``; BERT's (`BERT_SPECIALS`)
    otherwise. Pass a `SpecialTokens` explicitly for other vocabularies.
    """
    if (tokens and tokens[0] == "<s>") or any(t.startswith(_SPACE) for t in tokens):
        return ROBERTA_SPECIALS
    return BERT_SPECIALS


def strip_piece(token: str, scheme: str) -> str:
    """The piece without its word-boundary marker (``##`` for WordPiece, ``Ġ`` for BPE)."""
    if scheme == WORDPIECE and token.startswith(_CONTINUATION) and len(token) > 2:
        return token[2:]
    if scheme == BPE and token.startswith(_SPACE):
        return token[1:]
    return token


def starts_word(token: str, scheme: str) -> bool:
    """Whether a (non-special) piece opens a new word by its marker alone.

    WordPiece: every piece without ``##``; BPE: pieces with ``Ġ``.
    """
    if scheme == WORDPIECE:
        return not (token.startswith(_CONTINUATION) and len(token) > 2)
    return token.startswith(_SPACE)


def normalise_text(text: str) -> str:
    """Text as BERT-uncased sees it, without spaces: lowercased, NFD, accents dropped.

    As BERT's BasicTokenizer(do_lower_case=True): lowercase, then NFD and drop
    combining marks (Mn); control and format characters (Cc, Cf) and whitespace
    are dropped too. Both sides of an alignment (the given words and the pieces)
    go through this, so cased and uncased vocabularies align alike.
    """
    decomposed = unicodedata.normalize("NFD", text.lower())
    return "".join(
        c for c in decomposed if unicodedata.category(c) not in _DROPPED and not c.isspace()
    )


@functools.cache
def _byte_decoder() -> dict[str, int]:
    # GPT-2's bytes_to_unicode, inverted: printable bytes map to themselves, the
    # rest to code points 256 and up, in byte order.
    keep = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[chr(b)] = b
        else:
            table[chr(256 + extra)] = b
            extra += 1
    return table


def piece_bytes(token: str, scheme: str) -> bytes:
    """The UTF-8 bytes a piece stands for, marker removed.

    WordPiece pieces are text; byte-level BPE pieces are decoded through GPT-2's
    byte table (a character outside it is taken as its own UTF-8).
    """
    piece = strip_piece(token, scheme)
    if scheme != BPE:
        return piece.encode("utf-8")
    table = _byte_decoder()
    out = bytearray()
    for c in piece:
        if c in table:
            out.append(table[c])
        else:
            out.extend(c.encode("utf-8"))
    return bytes(out)


def is_punctuation(text: str) -> bool:
    """Whether every character of a non-empty string is Unicode punctuation (P*)."""
    return bool(text) and all(unicodedata.category(c).startswith("P") for c in text)


def token_masks(tokens: Sequence[str], specials: SpecialTokens) -> dict[str, np.ndarray]:
    """Boolean [T] masks of the token classes Clark et al. 2019 count attention to.

    Returns:
      {"cls": tokens == specials.cls, "sep": tokens == specials.sep,
       "special": any of `specials.all`, "punct": the piece without its marker
       is in `specials.punctuation`}.
    """
    toks = list(tokens)
    return {
        "cls": np.array([t == specials.cls for t in toks], bool),
        "sep": np.array([t == specials.sep for t in toks], bool),
        "special": np.array([t in specials.all for t in toks], bool),
        "punct": np.array(
            [
                t not in specials.all and strip_piece(t, specials.scheme) in specials.punctuation
                for t in toks
            ],
            bool,
        ),
    }
