"""Token strings: word-piece schemes and the normalisation used to align words.

The special-token and punctuation classes are the contract's
(`jaxattn.token_classes`, shared with the engine's on-device statistics) and
are re-exported here.

Three tokenisation schemes are recognised from the token strings alone:

- ``"wordpiece"`` (BERT, DistilBERT, MiniLM): a piece that continues a word starts
  with ``##``; specials are ``[CLS]`` / ``[SEP]``.
- ``"bpe"`` (RoBERTa byte-level BPE): a piece that starts a new space-separated
  word starts with ``Ġ`` (the byte-level image of a space); other bytes are
  mapped to printable characters by GPT-2's ``bytes_to_unicode`` table, so
  ``é`` appears as ``Ã©``; specials are ``<s>`` / ``</s>`` (RoBERTa) or
  ``[CLS]`` / ``[SEP]`` (ModernBERT).
- ``"sentencepiece"`` (XLM-R, CamemBERT, ALBERT, DeBERTa-v3): a piece that starts
  a word starts with ``▁``; pieces are text.
"""

from __future__ import annotations

import functools
import unicodedata

from jaxattn.token_classes import (  # noqa: F401  (re-exported: the analyses' token names)
    _CONTINUATION,
    _SPACE,
    BERT_SPECIALS,
    BPE,
    ROBERTA_SPECIALS,
    SENTENCEPIECE,
    WORD_MARKERS,
    WORDPIECE,
    SpecialTokens,
    detect_specials,
    strip_piece,
    token_masks,
)

_DROPPED = frozenset({"Mn", "Cc", "Cf"})  # accents, control and format characters


def starts_word(token: str, scheme: str) -> bool:
    """Whether a (non-special) piece opens a new word by its marker alone.

    WordPiece: every piece without ``##``; BPE: pieces with ``Ġ``;
    SentencePiece: pieces with ``▁``.
    """
    if scheme == WORDPIECE:
        return not (token.startswith(_CONTINUATION) and len(token) > 2)
    return token.startswith(WORD_MARKERS[scheme])


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
    # scheme "bytes": byte-level BPE with the marker kept (decoded as the space it stands for)
    piece = token if scheme == "bytes" else strip_piece(token, scheme)
    if scheme not in (BPE, "bytes"):
        return piece.encode("utf-8")
    table = _byte_decoder()
    out = bytearray()
    for c in piece:
        if c in table:
            out.append(table[c])
        else:
            out.extend(c.encode("utf-8"))
    return bytes(out)


def display_token(token: str, scheme: str, specials: frozenset[str] = frozenset()) -> str:
    """A token as a reader should see it in a view.

    WordPiece tokens are shown as they are (``##`` marks a continuation, as
    BERT users expect). Byte-level BPE and SentencePiece pieces lose their
    word-start marker (``Ġ``, ``▁``) and byte-level pieces are decoded to text
    ("é", not "Ã©"; a piece holding part of a character shows U+FFFD).
    Special tokens are shown as they are.
    """
    if scheme == WORDPIECE or token in specials:
        return token
    return piece_bytes(token, scheme).decode("utf-8", errors="replace") or token


def display_tokens(tokens) -> list[str]:
    """`display_token` of every token, the scheme and specials detected from them."""
    tokens = list(tokens)
    sp = detect_specials(tokens)
    return [display_token(t, sp.scheme, sp.all) for t in tokens]


def readable_text(tokens) -> str:
    """The text the tokens spell, special tokens left out (for labels and titles)."""
    tokens = list(tokens)
    sp = detect_specials(tokens)
    words = [t for t in tokens if t not in sp.all]
    if sp.scheme == WORDPIECE:
        return " ".join(words).replace(" ##", "")
    if sp.scheme == BPE:  # Ġ is the byte-level image of the space: decode it with the rest
        raw = b"".join(piece_bytes(t, "bytes") for t in words)
        return raw.decode("utf-8", errors="replace").strip()
    return "".join(words).replace(WORD_MARKERS[sp.scheme], " ").strip()


def is_punctuation(text: str) -> bool:
    """Whether every character of a non-empty string is Unicode punctuation (P*)."""
    return bool(text) and all(unicodedata.category(c).startswith("P") for c in text)
