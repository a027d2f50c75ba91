"""Reading an input file: its raw records (for sharding) and its parsed `Record`s.

    for record in read_records("corpus.conllu"):       # format from the suffix or content
        record.text, record.sentence

`scan_records` finds record boundaries on raw bytes, without parsing, so a
dump can shard a file and fingerprint it in one pass; `read_records` parses
each record as it goes (`jaxattn.inputs.formats`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from jaxattn.errors import UsageError
from jaxattn.inputs.formats import (
    InputError,
    RawRecord,
    Record,
    check_format,
    detect_format,
    parse_record,
)
from jaxattn.inputs.utf8 import UTF8_BOM

# What to do with a record that cannot be read, and with one longer than the model's limit.
ON_ERROR = ("stop", "skip")
TOO_LONG = ("truncate", "skip", "error")


def scan_records(f: BinaryIO, fmt: str, digest=None) -> Iterator[RawRecord]:
    """The raw records of an open binary file, in order; feeds every byte to `digest`.

    Text and JSONL: each non-blank line. CoNLL-U: each block of non-blank lines
    holding at least one token line (a block of comments only is no record). A
    UTF-8 byte-order mark before the first line is no part of it.
    """
    check_format(fmt)
    block: list[bytes] = []
    start, index = 0, 0
    for number, raw in enumerate(f, 1):
        if digest is not None:
            digest.update(raw)
        line = raw.rstrip(b"\n").rstrip(b"\r")
        if number == 1:
            line = line.removeprefix(UTF8_BOM)
        blank = not line.strip()
        if fmt != "conllu":
            if not blank:
                yield RawRecord(index, number, (line,))
                index += 1
            continue
        if not blank:
            if not block:
                start = number
            block.append(line)
        elif block:
            if any(not b.startswith(b"#") for b in block):
                yield RawRecord(index, start, tuple(block))
                index += 1
            block = []
    if block and any(not b.startswith(b"#") for b in block):
        yield RawRecord(index, start, tuple(block))


def read_records(
    path: str | os.PathLike,
    fmt: str | None = None,
    *,
    on_error: str = "stop",
    limit: int | None = None,
) -> Iterator[Record]:
    """The records of an input file, parsed, lazily.

    Args:
      path: a text, JSONL or CoNLL-U file.
      fmt: "text", "jsonl" or "conllu"; None detects it (`detect_format`).
      on_error: "stop" raises at the first unreadable record; "skip" leaves it out.
      limit: stop after this many records (read or skipped).

    Raises:
      FileNotFoundError: no such file.
      InputError: an unreadable record (with on_error="stop"); its message
        names the file and line.
      UsageError: an unknown `fmt` or `on_error`, a path that is no string or path
        (texts themselves: capture them as they are), a limit that is no whole
        number >= 0.
    """
    if not isinstance(path, (str, os.PathLike)):  # Path(["a"]): a TypeError from pathlib
        raise UsageError(
            f"read_records reads a file: give its path, got {type(path).__name__} (a list "
            "of texts needs no reading: capture it as it is)"
        )
    if limit is not None and (
        isinstance(limit, bool) or not hasattr(limit, "__index__") or limit < 0
    ):
        raise UsageError(f"limit must be None or a whole number of records >= 0, got {limit!r}")
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"input {path} is a directory: name a file in it")
    if not path.is_file():
        raise FileNotFoundError(f"no input file {path}")
    if on_error not in ON_ERROR:
        raise UsageError(f"on_error must be one of {', '.join(ON_ERROR)}, got {on_error!r}")
    fmt = check_format(fmt or detect_format(path))
    with open(path, "rb") as f:
        for raw in scan_records(f, fmt):
            if limit is not None and raw.index >= limit:
                return
            try:
                yield parse_record(raw, fmt)
            except InputError as e:
                if on_error == "stop":
                    raise InputError(e.line, e.reason, path) from None
