"""A small CoNLL-U reader: the FORM, HEAD and DEPREL columns of the basic tree.

CoNLL-U (https://universaldependencies.org/format.html): one token per line
with 10 tab-separated columns, ``#`` comment lines, a blank line after each
sentence. Multiword-token lines (ID ``1-2``) and empty nodes (ID ``1.1``) are
skipped: the syntactic words of the basic tree are what the FORM/HEAD/DEPREL
columns of integer-ID lines describe.

Relation labels are kept whole (``nmod:poss``, ``nsubj:pass``, ``obl:tmod``)
because Clark et al. 2019's Table 1 lists such subtypes (poss, nsubjpass,
auxpass) as relations of their own; `coarse_relation` gives the universal label
(``nmod``) for those who want the coarse grouping.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from pathlib import Path

from jaxattn.errors import InputError
from jaxattn.inputs.utf8 import UTF8_BOM, decode_line

_ID, _FORM, _HEAD, _DEPREL = 0, 1, 6, 7


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sentence:
    """One CoNLL-U sentence.

    Attributes:
      words: the FORM of each syntactic word.
      heads: the HEAD of each word: 0 for the root, else the 1-indexed head word.
      deprels: the DEPREL of each word, subtype included.
      sent_id: the ``# sent_id`` comment, if any.
      text: the ``# text`` comment, if any.
    """

    words: tuple[str, ...]
    heads: tuple[int, ...]
    deprels: tuple[str, ...]
    sent_id: str | None = None
    text: str | None = None

    def arcs(self, coarse: bool = False) -> Iterator[tuple[int, int, str]]:
        """(dependent, head, relation) with 0-indexed word positions; the root arc is left out.

        Args:
          coarse: give the universal label without its subtype (`coarse_relation`).
        """
        for dep, (head, rel) in enumerate(zip(self.heads, self.deprels, strict=True)):
            if head > 0:
                yield dep, head - 1, coarse_relation(rel) if coarse else rel


def coarse_relation(label: str) -> str:
    """The universal relation of a UD label: the part before ``:`` (``nmod:poss`` -> ``nmod``)."""
    return label.split(":", 1)[0]


def _utf8_lines(f) -> Iterator[str]:
    """The lines of a binary file as text; a byte-order mark before the first is
    passed over, as every input format does."""
    for number, data in enumerate(f, 1):
        yield decode_line(data.removeprefix(UTF8_BOM) if number == 1 else data, number)


def read_conllu(source: str | Path | Iterable[str]) -> Iterator[Sentence]:
    """Read the sentences of a CoNLL-U file, lazily.

    Args:
      source: a path, or an iterable of lines (e.g. an open file or a list).

    Yields:
      One `Sentence` per sentence, in file order.

    Raises:
      InputError: a line that is not UTF-8, a token line without 10 columns, a
        non-integer HEAD, a HEAD that is no word of its sentence, or IDs that are
        not 1, 2, 3, ... within a sentence (named by line number, and by file where
        `source` is a path).
    """
    if isinstance(source, (str, Path)):
        with open(source, "rb") as f:
            try:
                yield from read_conllu(_utf8_lines(f))
            except InputError as e:
                raise InputError(e.line, e.reason, source) from None
        return
    rows: list[tuple[str, int, str, int]] = []
    meta: dict[str, str] = {}
    for number, raw in enumerate(source, 1):
        line = raw.rstrip("\n").rstrip("\r")
        if not line.strip():
            if rows:
                yield _sentence(rows, meta)
            rows, meta = [], {}
            continue
        if line.startswith("#"):
            key, sep, value = line[1:].partition("=")
            if sep and key.strip() in ("sent_id", "text"):
                meta[key.strip()] = value.strip()
            continue
        cols = line.split("\t")
        if len(cols) != 10:
            raise InputError(number, f"expected 10 tab-separated columns, got {len(cols)}")
        if "-" in cols[_ID] or "." in cols[_ID]:
            continue  # multiword token or empty node: not a word of the basic tree
        if cols[_ID] != str(len(rows) + 1):
            raise InputError(number, f"word ID {cols[_ID]!r}, expected {len(rows) + 1}")
        try:
            head = int(cols[_HEAD])
        except ValueError:
            raise InputError(number, f"HEAD {cols[_HEAD]!r} is not an integer") from None
        rows.append((cols[_FORM], head, cols[_DEPREL], number))
    if rows:
        yield _sentence(rows, meta)


def _sentence(rows: list[tuple[str, int, str, int]], meta: dict[str, str]) -> Sentence:
    """The sentence of its token rows (form, head, relation, line number)."""
    words, heads, rels, numbers = zip(*rows, strict=True)
    for head, number in zip(heads, numbers, strict=True):
        if not 0 <= head <= len(words):
            raise InputError(
                number,
                f"HEAD {head} is no word of the sentence: valid heads are "
                f"0 (the root) to {len(words)}",
            )
    return Sentence(
        words=words, heads=heads, deprels=rels, sent_id=meta.get("sent_id"), text=meta.get("text")
    )
