"""Each checkpoint's tokenizer, as transformers resolves it, kept beside the compiled programs.

`transformers.AutoTokenizer` is how a checkpoint's tokenizer is read: it picks the
tokenizer class from the files (with its own rules for Hub quirks) and the class
may adjust the backend the files describe. Importing it costs seconds (it imports
torch where torch is installed: 2.5 s of a 4.7 s `jaxattn.load` on the 2-core CPU
machine). What the engine keeps of it is the backend (`tokenizers`), whose JSON the
first load writes here, keyed by the tokenizer files' bytes and the versions of
transformers and tokenizers; a later load of the same files builds the backend from
that JSON and reads the transformers tokenizer only if something asks for it
(`jaxattn.engine.Tokenizer.hf`: special tokens for the MLM loss, the BOS analyses,
`save`).

The entries live in `jaxattn-tokenizers/` inside the compilation cache directory
(`jaxattn.engine.cache`), so turning that cache off turns this off too. An entry
that cannot be read is ignored (the tokenizer is read the long way and written
again); entries are written whole (a temporary file renamed), so processes sharing
the directory see an entry or none.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import tempfile
from pathlib import Path

from jaxattn.engine.cache import remote

log = logging.getLogger("jaxattn.checkpoints")

SUBDIRECTORY = "jaxattn-tokenizers"
# Bump when what an entry holds, or how the engine reads it, changes.
FORMAT = 1
# What AutoTokenizer reads besides the tokenizer files: the model type picks the class.
_ALSO_READ = ("config.json", "added_tokens.json")
_TOKENIZER_PREFIXES = ("tokenizer", "vocab", "merges", "special_tokens", "spiece")


def is_tokenizer_file(name: str) -> bool:
    """Whether a checkpoint file belongs to its tokenizer (what AutoTokenizer may read)."""
    return name.startswith(_TOKENIZER_PREFIXES)


def key(path: Path) -> str:
    """The entry name of the tokenizer files in checkpoint directory `path`: a hash of
    their names and bytes, config.json's, and the versions that resolve them."""
    digest = hashlib.sha256(f"jaxattn-tokenizer {FORMAT}".encode())
    for package in ("transformers", "tokenizers"):
        digest.update(f"\0{package} {importlib.metadata.version(package)}".encode())
    for file in sorted(path.iterdir(), key=lambda f: f.name):
        if (is_tokenizer_file(file.name) or file.name in _ALSO_READ) and file.is_file():
            digest.update(f"\0{file.name}\0".encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()


def entry(cache: Path | str | None, path: Path) -> Path | None:
    """The entry file of `path`'s tokenizer files in cache directory `cache` (None: no
    cache; a URL, a remote compilation cache: none kept here either): `key` computed once
    for a lookup and, on a miss, the store after it."""
    if cache is None or remote(cache):
        return None
    return cache / SUBDIRECTORY / f"{key(path)}.json"


def lookup(file: Path | None) -> str | None:
    """The backend JSON kept in entry `file`, or None (no cache, no entry, or one that
    cannot be read)."""
    if file is None:
        return None
    try:
        kept = json.loads(file.read_text("utf-8"))
        backend = kept["backend"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.debug("tokenizer cache entry %s unreadable (%s): reading the files", file, e)
        return None
    return backend if isinstance(backend, str) else None


def store(file: Path | None, path: Path, backend: str) -> None:
    """Keep the backend JSON of `path`'s tokenizer files in entry `file`; a cache that
    cannot be written is left alone (logged: loading goes on)."""
    if file is None:
        return
    folder = file.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"format": FORMAT, "checkpoint": str(path), "backend": backend}, f)
            os.replace(tmp, file)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:
        log.warning("could not keep the tokenizer of %s in %s: %s", path, folder, e)
