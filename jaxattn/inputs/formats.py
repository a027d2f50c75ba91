"""Input formats: one record (raw lines) -> one `Record`, with errors that name the line.

A *record* is one example of an input file: a non-blank line of a text or JSONL
file, a sentence (a block of non-blank lines) of a CoNLL-U file. Records are
found on raw bytes (`jaxattn.inputs.records`), so an unreadable record (invalid
UTF-8, bad JSON, no "text") still occupies its place, and `parse_record` turns
one into a `Record` or raises `InputError` naming the line.

- text: one example per line; a pair as ``A ||| B`` or ``A<TAB>B``; white
  space around a text or a part is dropped; two separators in a line are an error.
- JSONL: one object per line: "text" (required), "text_b" (a pair), "id",
  taken exactly as written.
- In text and JSONL alike an empty text, or an empty side of a pair (white space
  only), is a bad record, as an empty text argument is refused: it would be an
  example of the special tokens alone.
- CoNLL-U: each sentence's words (FORM) joined by single spaces, so the word
  pieces align to the words (what the analyses need); id = ``# sent_id``; the
  parsed tree rides along as `Record.sentence`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from jaxattn.errors import InputError, UsageError
from jaxattn.inputs.conllu import Sentence, read_conllu
from jaxattn.inputs.utf8 import UTF8_BOM, decode_line

Text = str | tuple[str, str]
"""One example: a sentence, or a (sentence_a, sentence_b) pair."""

FORMATS = ("text", "jsonl", "conllu")
# How records become texts; bumped when that changes (a dump store records it).
# 3: an empty text or side of a pair is a bad record (2 kept it as an example).
READER = "jaxattn.inputs/3"
PAIR_SEPARATOR = "|||"
_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".conllu": "conllu"}


@dataclasses.dataclass(frozen=True)
class RawRecord:
    """One record's raw lines (bytes, line endings stripped) and where it starts."""

    index: int
    line: int
    lines: tuple[bytes, ...]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Record:
    """One readable record: an example to capture.

    Attributes:
      index: 0-based record number in the input.
      line: 1-based line where it starts.
      id: the input's id, else str(index).
      text: a string, or a (sentence_a, sentence_b) pair.
      sentence: the parsed CoNLL-U sentence (words, heads, relations), else None.
    """

    index: int
    line: int
    id: str
    text: Text
    sentence: Sentence | None = None


def split_pair(line: str) -> Text:
    """``A ||| B`` or ``A<TAB>B`` -> (A, B); any other line is one text. Each part is
    stripped of surrounding white space (which would change byte-level BPE tokens).

    Raises:
      InputError: more than one separator in the line.
    """
    separator = PAIR_SEPARATOR if PAIR_SEPARATOR in line else "\t"
    parts = line.split(separator)
    if len(parts) > 2:
        example = "A ||| B" if separator == PAIR_SEPARATOR else "A<TAB>B"
        name = repr(PAIR_SEPARATOR) if separator == PAIR_SEPARATOR else "tab"
        raise InputError(None, f"more than one {name} (a pair is '{example}')")
    if len(parts) == 1:
        return parts[0].strip()
    return (parts[0].strip(), parts[1].strip())


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
        for number, raw in enumerate(f):
            raw = raw if number else raw.removeprefix(UTF8_BOM)
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


def check_format(fmt: str) -> str:
    """`fmt` if it is one of FORMATS (UsageError naming the valid ones otherwise)."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown input format {fmt!r}: valid formats are {', '.join(FORMATS)}")
    return fmt


def parse_record(raw: RawRecord, fmt: str) -> Record:
    """Parse one record of format `fmt`.

    Raises:
      InputError: invalid UTF-8, a text line with more than one pair separator,
        bad JSON, a JSON value without a string "text", an empty text or side of
        a pair, a malformed CoNLL-U sentence.
    """
    if check_format(fmt) == "conllu":
        return _parse_conllu(raw)
    line = decode_line(raw.lines[0], raw.line)
    if fmt == "jsonl":
        return _parse_jsonl(line, raw)
    try:
        text = check_nonempty(split_pair(line))
    except InputError as e:
        raise InputError(raw.line, e.reason) from None
    return Record(index=raw.index, line=raw.line, id=str(raw.index), text=text)


def check_nonempty(text: Text, names: tuple[str, str, str] | None = None) -> Text:
    """`text` if neither it nor a side of the pair is empty (white space only).

    Args:
      names: what to call the text, sentence A and sentence B in the error
        (default "the text", "sentence A of the pair", "sentence B of the pair").

    Raises:
      InputError: (no line) naming the empty one.
    """
    one, a, b = names or ("the text", "sentence A of the pair", "sentence B of the pair")
    named = zip((a, b), text, strict=True) if isinstance(text, tuple) else [(one, text)]
    for name, part in named:
        if not part.strip():
            raise InputError(None, f"{name} is empty: an example needs a sentence")
    return text


def _parse_jsonl(line: str, raw: RawRecord) -> Record:
    try:
        doc = json.loads(line)
    except ValueError as e:
        raise InputError(raw.line, f"bad JSON: {e}") from None
    except RecursionError:  # json's decoder recurses once per [ or {
        raise InputError(raw.line, "bad JSON: nested too deeply") from None
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
    try:
        check_nonempty(text if text_b is None else (text, text_b), ('"text"', '"text"', '"text_b"'))
    except InputError as e:
        raise InputError(raw.line, e.reason) from None
    return Record(
        index=raw.index,
        line=raw.line,
        id=str(raw.index) if id_ is None else str(id_),
        text=text if text_b is None else (text, text_b),
    )


def _parse_conllu(raw: RawRecord) -> Record:
    lines = [decode_line(data, raw.line + i) for i, data in enumerate(raw.lines)]
    try:
        sentences = list(read_conllu(lines))
    except InputError as e:
        # read_conllu numbers lines from 1 within the block it was given.
        raise InputError(raw.line + (e.line or 1) - 1, e.reason) from None
    if len(sentences) != 1:  # a block of comments only is not a record (see records)
        raise InputError(raw.line, f"expected one sentence, found {len(sentences)}")
    sentence = sentences[0]
    return Record(
        index=raw.index,
        line=raw.line,
        id=sentence.sent_id or str(raw.index),
        text=" ".join(sentence.words),
        sentence=sentence,
    )


def check_utf8(text: str, index: int) -> str:
    """`text` if it encodes as UTF-8; else InputError naming text `index` and the character.

    A non-UTF-8 command-line argument or file reaches Python as lone surrogates
    (surrogateescape): they are named as the undecodable bytes they were.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        error = InputError(
            None,
            f"text {index} is not valid UTF-8: {_describe(text[e.start])} at character {e.start}",
        )
        error.index = index
        raise error from None
    return text


def check_text(text, index: int) -> Text:
    """`text` if it is a string or a (sentence_a, sentence_b) pair of strings (a pair
    given as a list comes back a tuple), each valid UTF-8 (`check_utf8`).

    Raises:
      UsageError: anything else, named by `index` and what it is (a tuple of 3 items,
        a pair whose item 1 is None, an int).
      InputError: a lone surrogate (`check_utf8`).
    """
    if isinstance(text, str):
        return check_utf8(text, index)
    if isinstance(text, (tuple, list)) and len(text) == 2:
        bad = [i for i, s in enumerate(text) if not isinstance(s, str)]
        if not bad:
            return (check_utf8(text[0], index), check_utf8(text[1], index))
        got = f"a pair whose item {bad[0]} is {type(text[bad[0]]).__name__}"
    elif isinstance(text, (tuple, list)):
        got = f"a {type(text).__name__} of {len(text)} item{'' if len(text) == 1 else 's'}"
    else:
        got = type(text).__name__
    raise UsageError(
        f"texts[{index}] must be a string or a (sentence_a, sentence_b) pair of strings, got {got}"
    )


def _describe(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # Python's surrogateescape of an undecodable byte
        return f"the undecodable byte 0x{code - 0xDC00:02x} (was it written in another encoding?)"
    return f"the lone surrogate U+{code:04X}"
