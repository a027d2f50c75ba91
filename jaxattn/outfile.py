"""Output files written whole or not at all.

`replacing(path)` writes a regular file's new content to a temporary file
beside it and renames that over it only once everything is written: a command
that fails (a full disk, an error, Ctrl-C) leaves the previous output as it was,
or no file, never a truncated one. The temporary file takes the old file's
permission bits (a new one: 0666 less the umask, as `open` would). An OSError
names `path`.

Paths that are not a plain file of their own are written in place, as `open`
would: a device or pipe (`/dev/null`, `/dev/stdout`), a symbolic link (the
write goes through it) and a file with other hard links (all names see it).

A leaf: the standard library only (captures, reports and pages all use it).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from typing import IO


def _in_place(path: str) -> bool:
    """Whether `path` exists as something a rename would replace wrongly."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    return not stat.S_ISREG(st.st_mode) or st.st_nlink > 1


@contextlib.contextmanager
def replacing(path: str | os.PathLike, mode: str = "wb") -> Iterator[IO]:
    """A file object for `path`'s new content ("wb" or "w", UTF-8), put in place on success.

    Raises:
      OSError: writing or renaming failed (its filename is `path`); nothing changed.
    """
    path = os.fspath(path)
    encoding = None if "b" in mode else "utf-8"
    if _in_place(path):
        with open(path, mode, encoding=encoding) as f:
            yield f
        return
    head, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(head, f".{name[:100]}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with contextlib.suppress(FileNotFoundError):  # an existing file keeps its mode
            os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
        with os.fdopen(fd, mode, encoding=encoding) as f:
            yield f
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.errno is not None and e.filename in (None, tmp):
            raise type(e)(e.errno, e.strerror, path) from e
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` (UTF-8) to `path` whole or not at all."""
    with replacing(path, "w") as f:
        f.write(text)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` whole or not at all."""
    with replacing(path) as f:
        f.write(data)
