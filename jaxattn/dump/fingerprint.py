"""Content fingerprints: a resumed dump must use the very same model.

The model's fingerprint is a SHA-256 over its checkpoint directory's files
(names and contents: config, weights, tokenizer), so the same checkpoint found
at another path is the same model, while a fine-tuned one with the same
architecture and name is not.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

_BLOCK = 1 << 20
_IGNORED_DIRS = {"__pycache__"}


def file_sha256(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def checkpoint_fingerprint(directory: str | os.PathLike) -> str:
    """``sha256:<hex>`` over every file of a checkpoint directory, by relative path.

    Hidden files and ``__pycache__`` are left out: they do not define the model.

    Raises:
      FileNotFoundError: `directory` is not a directory.
    """
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"model directory {root} does not exist")
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _IGNORED_DIRS and d[0] != ".")
        for name in sorted(filenames):
            if name.startswith(".") or name.endswith(".pyc"):
                continue
            path = Path(dirpath) / name
            digest.update(f"{path.relative_to(root).as_posix()}\0{file_sha256(path)}\n".encode())
    return "sha256:" + digest.hexdigest()
