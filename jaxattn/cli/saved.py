"""INPUT arguments that are captures already: a store of `jaxattn dump`, or a capture file.

    caps = open_saved("ewt.zarr")          # a Store: a lazy sequence of Captures
    caps = open_saved("one.npz")           # [Capture]
    open_saved("corpus.txt")               # None: texts, to be captured
    require(caps, ("queries", "keys"), "INPUT ewt.zarr", "jaxattn view --global")
    check_one_model([("INPUT a.zarr", a.provenance), ("INPUT b.zarr", b.provenance)])

A store is a directory with a ``zarr.json`` at its root (`jaxattn.store`) or a
TensorStore kvstore URL with no white space: any URL of a scheme in `URL_SCHEMES`
(``gs://bucket/ewt.zarr``, ``s3://bucket/ewt.zarr``, ``file:///data/ewt.zarr``),
or an ``http(s)://`` URL whose path ends in ``.zarr`` or ``.zarr/`` (any other web
address stays a text). A store cannot be read over http(s): TensorStore's http
kvstore cannot list the manifest's parts, so such a URL is refused, saying so.
A sentence that merely contains a URL stays a sentence.
A store is read lazily, example by example: a corpus dumped once on a cluster
is analysed and viewed anywhere, without recapturing.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Sequence
from pathlib import Path

from jaxattn.capture import Capture
from jaxattn.errors import UsageError
from jaxattn.inputs import STDIN

URL_SCHEMES = ("gs", "s3", "file")
_URL = re.compile(rf"(?:{'|'.join(URL_SCHEMES)})://\S+|https?://\S+\.zarr/?")


def is_store(arg: str) -> bool:
    """True when `arg` names a store: a kvstore URL, or a directory with a zarr.json."""
    if _URL.fullmatch(arg):
        return True
    try:
        path = Path(arg)
        return path.is_dir() and (path / "zarr.json").is_file()
    except (OSError, ValueError):  # too long for a file name, a NUL byte: a text
        return False


def is_capture_file(arg: str) -> bool:
    """True when `arg` is an existing ``.npz`` file (a saved `Capture`)."""
    if arg == STDIN:
        return False
    try:
        path = Path(arg)
        return path.is_file() and (arg.lower().endswith(".npz") or zipfile.is_zipfile(path))
    except (OSError, ValueError):
        return False


def open_saved(arg: str) -> Sequence[Capture] | None:
    """The captures `arg` names: a `jaxattn.store.Store` (lazy), or [the capture of a
    capture file]; None when `arg` is not saved captures (a text or an input file).

    Raises:
      CaptureFileError: the store or file cannot be read (saying why).
      UsageError: a store URL over http(s), which cannot be read.
    """
    if is_store(arg):
        if arg.startswith(("http://", "https://")):
            raise UsageError(
                f"cannot read the store at {arg}: a store is not readable over http(s) "
                f"(its manifest parts cannot be listed there); copy it to a local "
                f"directory or give a {'://, '.join(URL_SCHEMES)}:// URL"
            )
        from jaxattn.store import open_store

        return open_store(arg)
    if is_capture_file(arg):
        return [Capture.load(arg)]
    return None


def stored_quantities(caps: Sequence[Capture]) -> tuple[str, ...]:
    """The quantities saved captures hold (a store's from its metadata: nothing is read)."""
    what = getattr(caps, "what", None)
    if what is not None:
        return tuple(what)
    return tuple(sorted(set.intersection(*(set(c.what) for c in caps)))) if caps else ()


def require(
    caps: Sequence[Capture], what: Sequence[str], where: str, needed_by: str, also=()
) -> None:
    """UsageError naming the quantities `needed_by` needs that the saved `caps` lack.

    Args:
      caps: a store or a list of captures.
      what: the quantity names the command needs.
      where: the input in words ("INPUT ewt.zarr").
      needed_by: the command or view in words ("jaxattn analyze").
      also: quantities the command uses when present: the advice asks for them too.
    """
    have = stored_quantities(caps)
    missing = [q for q in what if q not in have]
    if missing:
        both = ",".join(dict.fromkeys((*have, *what, *also)))
        verb = "dump" if hasattr(caps, "metadata") else "capture"
        redo = f"{verb} it again with --what {both}"
        raise UsageError(
            f"{where} holds {', '.join(have) or 'no quantity'}; {needed_by} needs "
            f"{', '.join(missing)}: {redo}"
        )


def _model(prov) -> str:
    """A provenance in words: the model's name and weights fingerprint."""
    weights = f", weights {prov['weights'][:20]}" if prov.get("weights") else ""
    return f"{prov.get('model') or 'an unnamed model'}{weights}"


def check_one_model(named: Sequence[tuple[str, dict]], verb: str = "view") -> None:
    """UsageError naming two inputs whose models differ, of (where in words, provenance)
    pairs: their weights fingerprints when both have one, else their names and configs
    (an empty provenance: unknown, passes). One page draws the captures of one model;
    `verb` says what the command does with them ("map", "view")."""
    known = [(w, p) for w, p in named if p.get("model") or p.get("weights")]
    for where, b in known[1:]:
        first, a = known[0]
        if a.get("weights") and b.get("weights"):
            same = a["weights"] == b["weights"]
        else:
            ca, cb = a.get("config"), b.get("config")
            same = a.get("model") == b.get("model") and (not (ca and cb) or ca == cb)
        if not same:
            raise UsageError(
                f"{where} comes from {_model(b)}, {first} from "
                f"{_model(a)}: {verb} the captures of one model together"
            )


def saved_parses(caps: Sequence[Capture], conllu: str, input_name: str) -> list:
    """The CoNLL-U parse of each saved capture, from the file it was captured from.

    A store's examples are matched by their record index and id (``# sent_id``),
    so a store of part of a file, or with skipped records, still lines up; the
    captures of capture files by their text (the sentence's words joined by spaces).

    Raises:
      UsageError: `conllu` is not the file the captures came from (naming the
        first example that does not match).
    """
    from jaxattn.inputs import read_records

    records = list(read_records(conllu, "conllu"))
    entries = getattr(caps, "entries", None)
    if entries is None:
        by_text = {r.text: r.sentence for r in records}
        out = []
        for cap in caps:
            if cap.text not in by_text:
                said = "has no text" if cap.text is None else f"is {cap.text!r}"
                raise UsageError(
                    f"--conllu {conllu}: the capture of {input_name} {said}, which "
                    "is no sentence of the file; give the CoNLL-U file it was "
                    "captured from"
                )
            out.append(by_text[cap.text])
        return out
    out = []
    for e in entries:
        r = records[e.record] if e.record < len(records) else None
        if r is None or r.id != e.id:
            found = "no such sentence" if r is None else f"sentence {r.id!r}"
            raise UsageError(
                f"--conllu {conllu} is not the file {input_name} was dumped from: the store's "
                f"example of record {e.record} is {e.id!r}, the file has {found} there; give "
                "the CoNLL-U file the store was dumped from"
            )
        out.append(r.sentence)
    return out
