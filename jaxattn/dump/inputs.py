"""Dump inputs: text, JSONL and CoNLL-U records, parsed one at a time.

A *record* is one example of the input: a non-blank line of a text or JSONL
file, a sentence (a block of non-blank lines) of a CoNLL-U file. Records are
found on raw bytes (`jaxattn.dump.plan`), so an unreadable record (invalid
UTF-8, bad JSON, no "text") still occupies its place and the sharding does not
depend on what can be parsed. `parse` turns one record into an `Example` or
raises `InputError` naming the line.

- text: one example per line; a tab separates the two sentences of a pair.
- JSONL: one object per line: "text" (required), "text_b" (a pair), "id".
- CoNLL-U: each sentence's words (FORM) joined by single spaces, so the word
  pieces align to the words (as `jaxattn analyze` does); id = ``# sent_id``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from jaxattn.tokenize import Text

FORMATS = ("text", "jsonl", "conllu")
_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".conllu": "conllu"}


class InputError(ValueError):
    """An unreadable record.

    Attributes:
      line: the 1-based line where the problem is.
      reason: what is wrong, without the line number.
    """

    def __init__(self, line: int, reason: str):
        super().__init__(f"line {line}: {reason}")
        self.line, self.reason = line, reason


@dataclasses.dataclass(frozen=True)
class RawRecord:
    """One record's raw lines (bytes, line endings stripped) and where it starts."""

    index: int
    line: int
    lines: tuple[bytes, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Example:
    """One readable record.

    Attributes:
      record: 0-based record index.
      line: 1-based line where it starts.
      id: the input's id, else str(record).
      text: a string, or a (sentence_a, sentence_b) pair.
    """

    record: int
    line: int
    id: str
    text: Text


def detect_format(path: str | Path) -> str:
    """text, jsonl or conllu: by suffix, else by the first non-blank line.

    Lines starting with ``#`` are passed over; then a line starting with "{"
    means JSONL, a line of 10 tab-separated columns with an integer ID means
    CoNLL-U, anything else text.
    """
    path = Path(path)
    if path.suffix.lower() in _SUFFIXES:
        return _SUFFIXES[path.suffix.lower()]
    with open(path, "rb") as f:
        for raw in f:
            line = raw.strip()
            if not line:
                continue
            if line.startswith(b"{"):
                return "jsonl"
            if line.startswith(b"#"):
                continue  # a CoNLL-U comment, or a text line: the next line decides
            cols = raw.rstrip(b"\r\n").split(b"\t")
            return "conllu" if len(cols) == 10 and cols[0].split(b"-")[0].isdigit() else "text"
    return "text"


def parse(raw: RawRecord, fmt: str) -> Example:
    """Parse one record of format `fmt`.

    Raises:
      InputError: invalid UTF-8, a text line with more than one tab, bad JSON,
        a JSON value without a string "text", a malformed CoNLL-U sentence.
    """
    if fmt == "conllu":
        return _parse_conllu(raw)
    line = _decode(raw.lines[0], raw.line)
    if fmt == "text":
        parts = line.split("\t")
        if len(parts) > 2:
            raise InputError(raw.line, "more than one tab (a pair is 'A<TAB>B')")
        text: Text = parts[0] if len(parts) == 1 else (parts[0], parts[1])
        return Example(record=raw.index, line=raw.line, id=str(raw.index), text=text)
    if fmt == "jsonl":
        return _parse_jsonl(line, raw)
    raise ValueError(f"unknown input format {fmt!r}: valid formats are {', '.join(FORMATS)}")


def _decode(data: bytes, line: int) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(line, f"invalid UTF-8 at byte {e.start + 1}") from None


def _parse_jsonl(line: str, raw: RawRecord) -> Example:
    try:
        doc = json.loads(line)
    except ValueError as e:
        raise InputError(raw.line, f"bad JSON: {e}") from None
    if not isinstance(doc, dict):
        raise InputError(raw.line, f"expected a JSON object, got {type(doc).__name__}")
    text, text_b, id_ = doc.get("text"), doc.get("text_b"), doc.get("id")
    if text is None:
        raise InputError(raw.line, 'missing "text"')
    if not isinstance(text, str):
        raise InputError(raw.line, f'"text" must be a string, got {type(text).__name__}')
    if text_b is not None and not isinstance(text_b, str):
        raise InputError(raw.line, f'"text_b" must be a string, got {type(text_b).__name__}')
    if id_ is not None and (isinstance(id_, bool) or not isinstance(id_, (str, int))):
        raise InputError(raw.line, f'"id" must be a string or an integer, got {id_!r}')
    return Example(
        record=raw.index,
        line=raw.line,
        id=str(raw.index) if id_ is None else str(id_),
        text=text if text_b is None else (text, text_b),
    )


_LINE_PREFIX = re.compile(r"^line (\d+): ")


def _parse_conllu(raw: RawRecord) -> Example:
    from jaxattn.analysis.conllu import read_conllu  # lazy: only CoNLL-U needs it

    lines = [_decode(data, raw.line + i) for i, data in enumerate(raw.lines)]
    try:
        sentences = list(read_conllu(lines))
    except ValueError as e:
        # read_conllu numbers lines from 1 within the block it was given.
        match = _LINE_PREFIX.match(str(e))
        if not match:
            raise InputError(raw.line, str(e)) from None
        raise InputError(raw.line + int(match.group(1)) - 1, str(e)[match.end() :]) from None
    if len(sentences) != 1:  # a block of comments only is not a record (see plan)
        raise InputError(raw.line, f"expected one sentence, found {len(sentences)}")
    sentence = sentences[0]
    return Example(
        record=raw.index,
        line=raw.line,
        id=sentence.sent_id or str(raw.index),
        text=" ".join(sentence.words),
    )
