"""`jaxattn cache dir|info|clear`: what jaxattn keeps on disk between processes, and removing it.

Three kinds, where a `jaxattn` command keeps them (`places`): the compilation cache
directory (`jaxattn.engine.cache.cache_dir_in_use`) and below it, unless moved:

- compiled: XLA's compiled programs, JAX's persistent cache entries
  (`<name>-<sha256>-cache` at the directory's top, with the `-atime` stamps JAX writes
  where its cache has a size limit) and, on GPUs, XLA's autotuning results
  (`xla_gpu_per_fusion_autotune_cache_dir/`);
- programs: the traced capture and generation programs (`<sha256>.jaxprog` in
  `jaxattn-programs/`, or where $JAXATTN_PROGRAM_CACHE says: `jaxattn.engine.program_cache`);
- tokenizers: the checkpoints' resolved tokenizers (`<sha256>.json` in
  `jaxattn-tokenizers/`: `jaxattn.checkpoints.tokenizer_cache`).

`clear` removes those files (and their writers' leftover temporaries) and nothing else:
a directory goes only once empty (`os.rmdir`), symbolic links are neither followed nor
removed. Nothing here imports jax.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from pathlib import Path

from jaxattn.errors import UsageError
from jaxattn.progress import human_bytes

_ACTIONS = {
    "dir": "the directories in use, or why a cache is off",
    "info": "each kind's entries and their size, and the total",
    "clear": "remove the entries (every kind, or those named)",
}
# The kinds, as their flags name them, in the order they are listed.
_KINDS = {
    "compiled": "XLA's compiled programs (JAX's persistent compilation cache)",
    "programs": "the traced capture and generation programs (jax.export)",
    "tokenizers": "the checkpoints' resolved tokenizers",
}
_HASH = "[0-9a-f]{64}"  # the sha256 keys every writer names its entries by
_TEMPORARY = "[a-z0-9_]{8}"  # tempfile's random part


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "cache",
        help="show or clear the on-disk caches (compiled programs, programs, tokenizers)",
        description="Show where jaxattn keeps what it caches between processes, how much "
        "it holds, or remove it. Three kinds share the compilation cache directory "
        "($JAXATTN_COMPILATION_CACHE, else $XDG_CACHE_HOME/jaxattn/xla, else "
        "~/.cache/jaxattn/xla; off with JAXATTN_COMPILATION_CACHE=off): XLA's compiled "
        "programs, the traced capture and generation programs (jaxattn-programs/; "
        "$JAXATTN_PROGRAM_CACHE moves them or turns them off) and the checkpoints' "
        "resolved tokenizers (jaxattn-tokenizers/). clear removes only those entries: "
        "other files stay, and a directory goes only once empty.",
        epilog="examples:\n"
        "  jaxattn cache dir\n"
        "  jaxattn cache info\n"
        "  jaxattn cache clear --programs",
    )
    p.add_argument(
        "action",
        metavar="ACTION",
        choices=tuple(_ACTIONS),
        help="; ".join(f"{name}: {what}" for name, what in _ACTIONS.items()),
    )
    for kind, what in _KINDS.items():
        p.add_argument(
            f"--{kind}",
            action="store_true",
            help=f"{what}: named kinds combine, none named is every kind",
        )
    p.set_defaults(func=run)


@dataclasses.dataclass(frozen=True)
class Kind:
    """What one writer keeps: the names of its entries and of its other files (stamps,
    leftover temporaries), and the subdirectories whose every file is its own."""

    name: str
    entry: re.Pattern
    other: re.Pattern
    owned: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Place:
    """A kind's directory (None: off, `why` says why) and the variable that moves it."""

    kind: Kind
    path: Path | None
    why: str
    variable: str
    remote: str = ""  # a URL JAX's cache is kept at (gs://...), not listed or cleared here


def places() -> list[Place]:
    """Every kind's directory, as a `jaxattn` command's engine would use it."""
    from jaxattn.checkpoints import tokenizer_cache
    from jaxattn.engine import cache, program_cache

    compiled, setting = cache.cache_dir_in_use()
    moved_by = setting.split("=", 1)[0] or cache.ENV
    kinds = (
        Kind(
            "compiled",
            re.compile(rf".+-{_HASH}-cache"),
            re.compile(rf".+-{_HASH}-atime"),
            ("xla_gpu_per_fusion_autotune_cache_dir",),  # what JAX names it
        ),
        Kind(
            "programs",
            re.compile(_HASH + re.escape(program_cache.SUFFIX)),
            re.compile(rf"tmp{_TEMPORARY}\.tmp"),
        ),
        Kind("tokenizers", re.compile(rf"{_HASH}\.json"), re.compile(rf"\.tmp-{_TEMPORARY}\.json")),
    )
    programs, why = program_cache.directory_before_jax(compiled)
    if compiled is not None and cache.remote(compiled):  # JAX's, which this does not list
        remote = "a remote store: listed and cleared with its own tools"
        return [
            Place(kinds[0], None, remote, moved_by, remote=compiled),
            Place(kinds[1], programs, why, program_cache.ENV),
            Place(kinds[2], None, "the compilation cache is remote", moved_by),
        ]
    off = "the compilation cache is off"
    return [
        Place(kinds[0], compiled, setting, moved_by),
        Place(kinds[1], programs, why, program_cache.ENV),
        Place(
            kinds[2],
            compiled and compiled / tokenizer_cache.SUBDIRECTORY,
            off,
            moved_by,
        ),
    ]


def run(args) -> int:
    named = {kind for kind in _KINDS if getattr(args, kind)}
    chosen = [p for p in places() if not named or p.kind.name in named]
    width = max(len(p.kind.name) for p in chosen)
    if args.action == "dir":
        for place in chosen:
            print(f"{place.kind.name:<{width}}  {_where(place)}")
        return 0
    for place in chosen:  # refused before anything is read or removed
        _check(place)
    if args.action == "info":
        _info(chosen, width)
    else:
        _clear(chosen)
    return 0


def _where(place: Place) -> str:
    if place.remote:
        return f"{place.remote} ({place.why})"
    return str(place.path) if place.path is not None else f"off ({place.why})"


def _check(place: Place) -> None:
    path = place.path
    if path is not None and path.exists() and not path.is_dir():
        raise UsageError(
            f"the {place.kind.name} cache's directory {path} is a file, not a directory: "
            f"move it away, or set {place.variable} to a directory (or off)"
        )


def _entries(n: int) -> str:
    return f"{n} entry" if n == 1 else f"{n} entries"


def _files(place: Place) -> tuple[list[tuple[Path, int]], list[tuple[Path, int]]]:
    """(entries, the writer's other files), each with its size; none where the
    directory is off or absent."""
    entries: list[tuple[Path, int]] = []
    others: list[tuple[Path, int]] = []
    root, kind = place.path, place.kind
    if root is None or not root.is_dir():
        return entries, others
    for path in root.iterdir():
        try:
            st = path.lstat()
        except FileNotFoundError:  # removed meanwhile (another process's eviction)
            continue
        if stat.S_ISREG(st.st_mode) and kind.entry.fullmatch(path.name):
            entries.append((path, st.st_size))
        elif stat.S_ISREG(st.st_mode) and kind.other.fullmatch(path.name):
            others.append((path, st.st_size))
        elif stat.S_ISDIR(st.st_mode) and path.name in kind.owned:
            for folder, _, names in os.walk(path):
                for name in names:
                    file = Path(folder, name)
                    try:
                        st = file.lstat()
                    except FileNotFoundError:
                        continue
                    if stat.S_ISREG(st.st_mode):
                        others.append((file, st.st_size))
    return entries, others


def _info(chosen: list[Place], width: int) -> None:
    count = total = 0
    for place in chosen:
        if place.path is None:
            print(f"{place.kind.name:<{width}}  {_where(place)}")
            continue
        entries, others = _files(place)
        size = sum(s for _, s in entries + others)
        absent = "" if place.path.is_dir() else " (absent)"
        print(
            f"{place.kind.name:<{width}}  {_entries(len(entries)):>12}  {human_bytes(size):>8}  "
            f"{place.path}{absent}"
        )
        count, total = count + len(entries), total + size
    print(f"{'total':<{width}}  {_entries(count):>12}  {human_bytes(total):>8}")


def _clear(chosen: list[Place]) -> None:
    """Remove the chosen kinds' files, the compilation cache's own last (the others'
    directories may be inside it)."""
    count = total = 0
    for place in reversed(chosen):
        name = place.kind.name
        if place.path is None:
            print(f"{name}: {_where(place)}, nothing to remove")
            continue
        if not place.path.is_dir():
            print(f"{name}: nothing to remove ({place.path} does not exist)")
            continue
        entries, others = _files(place)
        removed, size = _remove(entries)
        size += _remove(others)[1]
        _remove_empty(place)
        print(f"{name}: removed {_entries(removed)} ({human_bytes(size)}) from {place.path}")
        count, total = count + removed, total + size
    print(f"removed {_entries(count)}, {human_bytes(total)} in all")


def _remove(files: list[tuple[Path, int]]) -> tuple[int, int]:
    """Unlink the files: (how many, their bytes); one gone meanwhile does not count."""
    count = size = 0
    for path, nbytes in files:
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        count, size = count + 1, size + nbytes
    return count, size


def _remove_empty(place: Place) -> None:
    """The kind's directories that are empty now: its own subdirectories, then its own."""
    root = place.path
    for owned in place.kind.owned:
        if (root / owned).is_dir() and not (root / owned).is_symlink():
            for folder, _, _ in os.walk(root / owned, topdown=False):
                _rmdir(Path(folder))
    _rmdir(root)


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()  # only an empty directory
    except OSError:
        pass
