"""Output files written whole or not at all.

`replacing(path)` writes to a temporary file beside `path` and renames it over
`path` only once everything is written: a command that fails (a full disk, an
error, Ctrl-C) leaves the previous output as it was, or no file, never a
truncated one. An OSError names `path`. The temporary file is created with the
usual permissions (0666 less the umask), as `open` would.

A leaf: the standard library only (captures, reports and pages all use it).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from typing import IO


@contextlib.contextmanager
def replacing(path: str | os.PathLike, mode: str = "wb") -> Iterator[IO]:
    """A file object for `path`'s new content ("wb" or "w", UTF-8), put in place on success.

    Raises:
      OSError: writing or renaming failed (its filename is `path`); nothing changed.
    """
    path = os.fspath(path)
    head, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(head, f".{name}.{secrets.token_hex(4)}.partial")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        encoding = None if "b" in mode else "utf-8"
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
