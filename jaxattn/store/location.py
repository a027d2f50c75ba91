"""What is at a store location: a store, nothing, or something a store must not touch.

`open_store` says what it found when there is no store (a file, an empty
directory, a directory of other things); `jaxattn dump` refuses an ``--out``
that is an existing file, or a non-empty directory that is not a jaxattn store
(it may be someone's data: a dump writes and deletes keys under its root).
Only local paths can be looked at this closely; for kvstore URLs (gs://...)
the root's zarr.json decides.
"""

from __future__ import annotations

import os
from pathlib import Path

from jaxattn.errors import CaptureFileError, UsageError
from jaxattn.quantities import QUANTITIES
from jaxattn.store import layout
from jaxattn.store import metadata as store_metadata
from jaxattn.store.kvstore import KeyValue, local_path, root_spec

_SHOWN = 3  # entries of a directory named in a message


def found_at(location: str | os.PathLike) -> str:
    """What is at a location that holds no store, in words for a message."""
    path = local_path(root_spec(location))
    if path is None:
        return "no zarr.json at its root"
    path = Path(path)
    if not path.exists():
        return "nothing: no such file or directory"
    if not path.is_dir():
        return "a file, not a directory"
    names = sorted(os.listdir(path))
    if not names:
        return "an empty directory"
    shown = ", ".join(names[:_SHOWN]) + (", ..." if len(names) > _SHOWN else "")
    return f"a directory of {len(names)} entries ({shown}) without a zarr.json"


def _store_part(name: str) -> bool:
    """A name a store's root holds (a quantity group, the manifest, zarr.json and its
    temporary files): another process of the same dump may be creating the store."""
    return name in QUANTITIES or name == layout.MANIFEST_DIR or name.startswith("zarr.json")


def hold_writer_lock(location: str | os.PathLike, process_count: int = 1, create: bool = True):
    """Lock a local store's directory against another dump writing it at once; returns
    the open descriptor (the lock lasts until it is closed or the process dies: a killed
    dump leaves no stale lock), or None for a store that is not a local directory.

    A job of one process locks it exclusively; each process of a job of several
    shares the lock, so their processes write one store together while a second
    job of one process (the same command run twice, or another command) is refused,
    and so is a job of several while one of one process writes. Two jobs of several
    processes at once are not told apart (STORE.md). `create` False: None where
    the directory does not exist yet (no dump writes it; the command line's check
    before the model loads leaves nothing behind).

    Raises:
      UsageError: another jaxattn dump holds the lock, naming --out.
    """
    import fcntl

    path = local_path(root_spec(location))
    if path is None or not (create or os.path.isdir(path)):
        return None
    try:
        os.makedirs(path, exist_ok=True)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # unwritable: the store's first write says why (`tensorstore_errors`)
        return None
    mode = fcntl.LOCK_EX if process_count == 1 else fcntl.LOCK_SH
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UsageError(
            f"--out {os.fspath(location)}: another jaxattn dump is writing this store now; "
            "two at once would overwrite each other's shards: wait for it to end (then "
            "rerun the same command to resume or check it), or choose another --out"
        ) from None
    except OSError:  # a file system without flock (ENOLCK, some network mounts): unlocked
        os.close(fd)
        return None
    return fd


def check_output(location: str | os.PathLike, overwrite: bool = False) -> None:
    """Check that a dump may write at `location`: nothing there, an empty directory, a
    jaxattn store (to resume or check, or with `overwrite` to delete), or a store being
    created by another process. `overwrite` replaces a jaxattn store only: the refusals
    say so.

    Raises:
      UsageError: an existing file or a path under one, a non-empty directory that is
        not a jaxattn store, or a zarr.json that is not a (readable) jaxattn store's; naming
        --out, what is there and what to do.
    """
    text = os.fspath(location)
    only = " (--overwrite replaces a jaxattn store only)" if overwrite else ""
    if not text.strip():  # not the current directory
        raise UsageError("--out is empty: name the store's directory")
    path = local_path(root_spec(location))
    path = (path.rstrip("/") or "/") if path is not None else None
    if path is not None and os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(
            f"--out {text} is an existing file; a store is a directory: choose another --out{only}"
        )
    if path is not None:  # a file above it: TensorStore would fail at the first write
        above = next((p for p in Path(path).parents if p.exists()), Path("."))
        if not above.is_dir():
            raise UsageError(f"--out {text}: {above} is a file, not a directory")
    try:
        if store_metadata.read(KeyValue(root_spec(location))) is not None:
            return
    except CaptureFileError as e:
        raise UsageError(
            f"--out {text}: {e}. jaxattn dump does not write into it: choose another --out "
            f"(or delete it, if it is yours and disposable){only}"
        ) from None
    if path is None or not os.path.isdir(path):
        return
    foreign = sorted(n for n in os.listdir(path) if not _store_part(n))
    if foreign:
        shown = ", ".join(foreign[:_SHOWN]) + (", ..." if len(foreign) > _SHOWN else "")
        raise UsageError(
            f"--out {text} is a non-empty directory that is not a jaxattn store (it holds "
            f"{shown}); it may be someone's data, so jaxattn dump does not write into it: "
            f"choose another --out, or an empty or new directory{only}"
        )
