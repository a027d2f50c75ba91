"""The benchmarks' sentences: an input file through the one reader (`jaxattn.inputs`)."""

from __future__ import annotations

from pathlib import Path

from jaxattn.inputs import SAMPLE_CORPUS, Record, read_records

# The UD English EWT dev split shipped with jaxattn (see BENCHMARKS.md).
DEFAULT_CONLLU = SAMPLE_CORPUS


def sentence_text(record: Record):
    """The text to benchmark on: a CoNLL-U sentence's own ``# text`` (real spacing),
    else the record's text (words joined by spaces, a line, a JSONL text or pair)."""
    if record.sentence is not None and record.sentence.text:
        return record.sentence.text
    return record.text


def read_sentences(path: str | Path, limit: int | None = None, *, singles: bool = False) -> list:
    """The first `limit` examples of an input file (any format), as benchmark texts.

    singles: leave out sentence pairs (for mixes that build their own pairs).
    """
    texts = [sentence_text(r) for r in read_records(path, limit=limit)]
    return [t for t in texts if isinstance(t, str)] if singles else texts
