"""What the corpus commands (view, analyze) share: reading INPUT, capturing with counts.

    texts = read_input("corpus.jsonl", limit=100)      # or "-" for standard input
    items = read_inputs(["a text", "x.npz", "ewt.zarr", "more.txt"])  # view's INPUT...
    caps = capture_counted(args, texts, what)          # --too-long, --layers/--heads, ...

Every command reports how many texts it truncated or skipped (`report`), in
the same words, on stderr.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from jaxattn.cli.saved import check_one_model, open_saved
from jaxattn.cli.source import open_source
from jaxattn.errors import InputError, UsageError
from jaxattn.inputs import STDIN, Record, Text, is_file_argument, read_records, split_pair
from jaxattn.inputs.formats import check_nonempty

# Directories holding standard input spooled to a file, removed at exit.
SPOOLED: list[str] = []


def input_path(arg: str | os.PathLike) -> Path:
    """The file to read for INPUT: the path itself, or standard input spooled to a file."""
    if str(arg) != STDIN:
        return Path(arg)
    tmp = tempfile.mkdtemp(prefix="jaxattn-stdin-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    SPOOLED.append(tmp)  # an interrupted process (os._exit) removes them itself
    path = Path(tmp) / "stdin"
    with open(path, "wb") as f:
        shutil.copyfileobj(sys.stdin.buffer, f)
    return path


def shown(arg: str | os.PathLike) -> str:
    """INPUT as a message names it: "standard input" for "-", else the path as given."""
    return "standard input" if str(arg) == STDIN else str(arg)


def records(arg, fmt: str | None = None, limit: int | None = None) -> Iterator[Record]:
    """The records of INPUT (a file or "-"), through the one reader; a bad record of
    standard input is named "standard input:LINE", not by the file it was spooled to."""
    found = read_records(input_path(arg), fmt, limit=limit)
    return found if str(arg) != STDIN else _from_stdin(found)


def _from_stdin(found: Iterator[Record]) -> Iterator[Record]:
    try:
        yield from found
    except InputError as e:
        raise InputError(e.line, e.reason, "standard input") from None


def check_corpus(path: str | os.PathLike, flag: str) -> Path:
    """`path` if it is an input file with at least one example (the rule of every command).

    Raises:
      FileNotFoundError, IsADirectoryError: naming the flag and path.
      InputError: the file has no examples, or its first one is unreadable.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{flag} {path} is a directory: name a file in it")
    if not path.is_file():
        raise FileNotFoundError(f"{flag} {path}: no such file")
    if next(iter(read_records(path, limit=1)), None) is None:
        raise InputError(None, f"{path} has no examples")
    return path


def read_input(arg, fmt: str | None = None, limit: int | None = None) -> list:
    """The texts (strings and pairs) of INPUT."""
    return [r.text for r in records(arg, fmt, limit)]


def text_argument(arg: str) -> Text:
    """INPUT `arg`, not a file: its text or pair (``A ||| B``).

    Raises:
      InputError: the text, or a side of the pair, is empty (as in an input file).
    """
    if not arg.strip():
        raise InputError(None, "an INPUT is empty: give a sentence or a file")
    sides = (f"sentence A of INPUT {arg!r}", f"sentence B of INPUT {arg!r}")
    return check_nonempty(split_pair(arg), ("an INPUT", *sides))


def read_inputs(inputs: list[str], limit: int | None = None, cap: int | None = None) -> list:
    """Each INPUT -> its Captures (a capture file, a store: read up to `limit`), the
    texts of an input file, or the text itself. Saved captures that would bring the
    examples (up to `limit`) over `cap` are refused before they are read, and so are
    saved captures of two models (`check_one_model`)."""
    items: list = []
    models: list = []  # (INPUT, provenance) of the saved ones: one model's captures per page
    for arg in inputs:
        saved = open_saved(arg)
        if saved is not None:
            prov = getattr(saved, "provenance", None)  # a store's; a capture file's own
            models.append((f"INPUT {arg}", prov if prov is not None else saved[0].provenance))
            check_one_model(models)
            count = min(len(items) + len(saved), limit or len(items) + len(saved))
            if cap and count > cap:
                raise UsageError(
                    f"INPUT {arg} brings the examples to {count}, over the page's "
                    f"cap of {cap} (--max-examples): give --limit N"
                )
            items += saved[: max(0, limit - len(items))] if limit else saved
        elif is_file_argument(arg):
            items += read_input(arg, limit=limit)
        else:
            items.append(text_argument(arg))
    return items[:limit] if limit else items


def report(stream, label: str) -> None:
    """One line on stderr when texts were truncated or skipped (`jaxattn.CaptureStream`)."""
    parts = []
    if stream.truncated:
        parts.append(f"{len(stream.truncated)} truncated to the model's limit")
    if stream.skipped:
        parts.append(f"{len(stream.skipped)} skipped as too long")
    if parts:
        print(f"{label}: {' and '.join(parts)} (--too-long)", file=sys.stderr)


def capture_counted(
    args, texts: list, what: tuple[str, ...], items: list | None = None, generate: bool = False
) -> list:
    """Captures of `texts` from --server or the local engine under the command's
    --layers/--heads/--precision/--too-long, reported with `report` (`generate`: of
    prompt + continuation, under --generate N, `jaxattn.cli.generated`). With `items`
    (texts and saved Captures mixed), the result follows `items`: its texts
    replaced by their captures, skipped ones left out."""
    caps: list = []
    skipped: set = set()
    if texts and generate:  # `view --generate N`
        from jaxattn.cli.generated import capture_generated

        _, caps, counts = capture_generated(args, texts, what)
        report(counts, f"jaxattn {args.command}")
        skipped = set(counts.skipped)
    elif texts:
        with open_source(args) as source:
            stream = source.capture_iter(
                texts,
                what=what,
                layers=args.layers,
                heads=args.heads,
                dtype="float32",
                too_long=args.too_long,
                precision=args.precision,
            )
            caps = list(stream)
        report(stream, f"jaxattn {args.command}")
        skipped = set(stream.skipped)
    if items is None:
        return caps
    captured = iter(caps)
    out, k = [], 0
    for x in items:
        if isinstance(x, str | tuple):
            if k not in skipped:
                out.append(next(captured))
            k += 1
        else:
            out.append(x)
    return out
