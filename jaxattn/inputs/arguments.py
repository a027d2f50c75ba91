"""Command-line arguments that may be a text or a file: one rule, no guessing.

An argument is a file when it is given as one: ``-`` (standard input), an
existing file, or something shaped like a path (no whitespace, and a ``/``
or a known suffix such as ``.txt``, ``.jsonl``, ``.conllu``, ``.npz``, ``.zarr``). A
path-shaped argument that names no file is an error, never a sentence; any
other argument is a text. A sentence that looks like a path (``and/or``) can
always be given through an input file.

`SAMPLE_CORPUS` is the UD English EWT dev split shipped with jaxattn (CC BY-SA
4.0; its licence and attribution are beside it), the default sentences of
`jaxattn bench` and `jaxattn loadtest`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

SAMPLE_CORPUS = Path(__file__).parent / "data" / "ud-english-ewt" / "en_ewt-ud-dev.conllu"
# Suffixes of the files commands read: inputs (any format), saved captures and stores
# (directories, named .zarr in every example of the docs).
PATH_SUFFIXES = (
    ".txt",
    ".text",
    ".tsv",
    ".jsonl",
    ".ndjson",
    ".json",
    ".conllu",
    ".npz",
    ".zarr",
)
STDIN = "-"


def looks_like_path(arg: str) -> bool:
    """No whitespace, and a path separator or a known file suffix."""
    if not arg or re.search(r"\s", arg):
        return False
    return "/" in arg or os.sep in arg or arg.lower().endswith(PATH_SUFFIXES)


def is_file_argument(arg: str, what: str = "INPUT") -> bool:
    """True when `arg` names a file to read, False when it is a text (see the module doc).

    Raises:
      FileNotFoundError: `arg` is shaped like a path but no such file exists.
      IsADirectoryError: `arg` is a directory.
    """
    if arg == STDIN:
        return True
    if not arg.strip():
        return False  # an empty text (commands refuse it), not the current directory
    try:
        path = Path(arg)
        is_file, is_dir = path.is_file(), path.is_dir()
    except (OSError, ValueError):  # too long for a file name, a NUL byte: a text
        is_file = is_dir = False
    if is_file:
        return True
    if is_dir:
        raise IsADirectoryError(f"{what} {arg} is a directory: name a file in it")
    if looks_like_path(arg):
        raise FileNotFoundError(
            f"{what} {arg}: no such file (an argument shaped like a path is read as a file; "
            "put a text that looks like one in an input file)"
        )
    return False
