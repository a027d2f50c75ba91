"""The token ids a greedy continuation stops at, as transformers' generate resolves them.

    read_eos_ids(path)  -> (128001, 128008, 128009)   # Llama-3-Instruct
                        -> None                       # neither file names one

transformers' ``generate(do_sample=False)`` stops at ``generation_config.eos_token_id``,
an int or a list of them (``_prepare_special_tokens`` makes it a 1-D tensor and a
continuation ends at any of its ids). ``from_pretrained`` (``adjust_generation_fn``) reads
that generation config from the checkpoint's generation_config.json, and only where there
is none from config.json (``GenerationConfig.from_pretrained(config_file_name=
"config.json")``, the raw file, not the config class's defaults). So:

1. generation_config.json's ``eos_token_id``, where the file names one;
2. else config.json's ``eos_token_id`` (int or list);
3. else None: the engine stops at its tokenizer's EOS token (`Engine.eos_ids`).

Where generation_config.json exists but names no ``eos_token_id`` (or null),
transformers would not fall back to config.json: it would stop at no EOS at all.
jaxattn falls back (2., then 3.) there, as it does where neither file names one
(transformers: no stop either); real checkpoints name it in one of the two.

A `jaxattn convert` output keeps the ids in jaxattn.json (``eos_token_id``,
`native.save`), read back by `read_eos_ids` too.
"""

from __future__ import annotations

from pathlib import Path

from jaxattn.checkpoints.hf_config import json_kind
from jaxattn.checkpoints.hf_files import read_json_object
from jaxattn.errors import CheckpointError

GENERATION_CONFIG = "generation_config.json"
CONFIG = "config.json"
FIELD = "eos_token_id"


def checked_eos_ids(value, where: str) -> tuple[int, ...] | None:
    """`value` (an ``eos_token_id`` as read from JSON) as a tuple of ids, None for null.

    Raises:
      CheckpointError: naming `where` (the file and field), unless `value` is a
        whole number >= 0 or a non-empty list of them.
    """
    if value is None:
        return None
    ids = value if isinstance(value, list) else [value]
    if ids and all(type(i) is int and i >= 0 for i in ids):
        return tuple(dict.fromkeys(ids))  # in order, once each
    raise CheckpointError(
        f'{where}: "{FIELD}" must be a token id (a whole number >= 0) or a non-empty list of '
        f"them, got {json_kind(value)} {_shown(value)}"
    )


def read_eos_ids(path: Path) -> tuple[int, ...] | None:
    """The EOS ids of the checkpoint directory `path` (the module's precedence), or None.

    Raises:
      CheckpointError: generation_config.json or config.json (or a converted
        checkpoint's jaxattn.json) is not JSON, or its eos_token_id is not a token
        id or a list of them (names the file and the field).
    """
    from jaxattn.checkpoints import native

    if native.is_native(path):
        file = path / native.MARKER
        return checked_eos_ids(read_json_object(file).get(FIELD), f"{file}")
    for name in (GENERATION_CONFIG, CONFIG):
        file = path / name
        if file.is_file():
            ids = checked_eos_ids(read_json_object(file).get(FIELD), f"{file}")
            if ids is not None:
                return ids
    return None


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
