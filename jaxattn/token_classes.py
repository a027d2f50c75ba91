"""Which tokens are [CLS], [SEP] and punctuation: one definition for the host and the device.

Clark et al. 2019 count attention to the cls token, the separators and
punctuation (periods and commas). The analyses (`jaxattn.analysis`) and the
engine's on-device head statistics (the `head_stats` quantity) both classify
tokens here, so their numbers agree. Two tokenisation schemes are recognised
from the token strings alone:

- ``"wordpiece"`` (BERT, DistilBERT, MiniLM): a piece that continues a word starts
  with ``##``; specials are ``[CLS]`` / ``[SEP]``.
- ``"bpe"`` (byte-level BPE: RoBERTa, ModernBERT): a piece that starts a new
  space-separated word starts with ``Ġ`` (the byte-level image of a space).
- ``"sentencepiece"`` (SentencePiece/Unigram: XLM-R, CamemBERT, ALBERT,
  DeBERTa-v3): a piece that starts a word starts with ``▁``.

The cls and separator strings are recognised on their own: ``<s>`` / ``</s>``
(RoBERTa, XLM-R, CamemBERT) or ``[CLS]`` / ``[SEP]`` (the rest).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

WORDPIECE = "wordpiece"
BPE = "bpe"
SENTENCEPIECE = "sentencepiece"
_CONTINUATION = "##"  # WordPiece: this piece continues the previous word
_SPACE = "Ġ"  # byte-level BPE: this piece follows a space
_SP_SPACE = "▁"  # SentencePiece: this piece starts a word
# scheme -> the marker of a word-initial piece
WORD_MARKERS = {BPE: _SPACE, SENTENCEPIECE: _SP_SPACE}


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
      scheme: "wordpiece", "bpe" or "sentencepiece" (see the module docstring).
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
    """The special tokens and piece scheme that match `tokens`.

    Scheme: "sentencepiece" when a piece starts with ``▁``, "bpe" when one
    starts with ``Ġ``, else "wordpiece". Specials: ``<s>``/``</s>`` when the
    sequence starts with ``<s>`` or holds ``</s>``, else ``[CLS]``/``[SEP]``.
    BERT's and RoBERTa's are `BERT_SPECIALS` and `ROBERTA_SPECIALS`; pass a
    `SpecialTokens` explicitly for other vocabularies.
    """
    scheme = WORDPIECE
    for name, marker in WORD_MARKERS.items():
        if any(t.startswith(marker) for t in tokens):
            scheme = name
            break
    angle = bool(tokens) and tokens[0] == "<s>" or "</s>" in tokens
    if angle or (scheme == BPE and not (tokens and tokens[0] == "[CLS]")):
        return dataclasses.replace(ROBERTA_SPECIALS, scheme=scheme)
    return dataclasses.replace(BERT_SPECIALS, scheme=scheme)


def strip_piece(token: str, scheme: str) -> str:
    """The piece without its word-boundary marker (``##``, ``Ġ`` or ``▁``)."""
    if scheme == WORDPIECE and token.startswith(_CONTINUATION) and len(token) > 2:
        return token[2:]
    marker = WORD_MARKERS.get(scheme)
    if marker and token.startswith(marker):
        return token[1:]
    return token


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


# Bits of `class_bits`, the [T] token classes the engine's head statistics take.
CLS_BIT, SEP_BIT, PUNCT_BIT = 1, 2, 4


def class_bits(tokens: Sequence[str], specials: SpecialTokens | None = None) -> np.ndarray:
    """[T] int8: CLS_BIT | SEP_BIT | PUNCT_BIT of each token (`token_masks` packed)."""
    masks = token_masks(tokens, specials or detect_specials(tokens))
    bits = masks["cls"] * CLS_BIT + masks["sep"] * SEP_BIT + masks["punct"] * PUNCT_BIT
    return bits.astype(np.int8)
