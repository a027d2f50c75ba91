"""tokenizer.json as jaxattn reads it (`jaxattn.checkpoints.loading.read_tokenizer`).

What jaxattn reads itself: the JSON (`read_json_object`, naming the line of an
error), the wrapping that turns whatever the tokenizers/transformers backends
raise on a damaged file into one CheckpointError, and the vocabulary check
against the model's vocab_size. The backends' own parsers are the tokenizers
project's to fuzz; a tokenizer that loads must then tokenise a text.
"""

from __future__ import annotations

import shutil

from harness import checkpoint, workdir

from jaxattn.checkpoints.hf_files import read_config
from jaxattn.checkpoints.loading import read_tokenizer
from jaxattn.errors import CheckpointError, InputError

DESIGNED = (CheckpointError, InputError)
TOKENS = (b'"vocab"', b'"model"', b'"type"', b'"WordPiece"', b'"BPE"', b'"Unigram"', b"[[[[[")
TOKENS += (b'"added_tokens"', b'"normalizer"', b'"pre_tokenizer"', b"null", b"-1", b"99999999")
_config = None


def prepare() -> None:
    """The checkpoint's config and a folder with its tokenizer files, made once."""
    global _config
    folder = workdir() / "tokenizer"
    if _config is None:
        source = checkpoint()
        _config = read_config(source)
        folder.mkdir(exist_ok=True)
        for f in source.iterdir():
            if f.name.startswith(("tokenizer", "special_tokens")) and f.is_file():
                shutil.copy(f, folder / f.name)


def seeds() -> list[bytes]:
    return [(checkpoint() / "tokenizer.json").read_bytes()]


def one_input(data: bytes) -> None:
    folder = workdir() / "tokenizer"
    (folder / "tokenizer.json").write_bytes(data)
    tokenizer = read_tokenizer(folder, _config)
    (encoded,) = tokenizer.encode(["the cat sat on the mat"], too_long="truncate")
    assert encoded.length >= 1, encoded
