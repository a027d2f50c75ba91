"""config.json -> `ModelConfig` (`jaxattn.checkpoints.hf_files.read_config`): every family's
config table, the refused model types, wrong JSON types, sizes that contradict."""

from __future__ import annotations

import json

from harness import checkpoint, workdir

from jaxattn.checkpoints.families import FAMILIES, REFUSED
from jaxattn.checkpoints.hf_files import read_config
from jaxattn.config import ModelConfig
from jaxattn.errors import CheckpointError

DESIGNED = (CheckpointError,)
TOKENS = (b'"model_type"', b'"bert"', b'"hidden_size"', b'"num_attention_heads"', b"[[[[[[")
TOKENS += (b"null", b"true", b"{}", b"[]", b"-1", b"1e999", b"0.5", b'"\\u0000"')
TOKENS += tuple(json.dumps(t).encode() for f in FAMILIES.values() for t in f.model_types)
TOKENS += tuple(json.dumps(t).encode() for t in REFUSED)


def seeds() -> list[bytes]:
    config = json.loads((checkpoint() / "config.json").read_text())
    out = [json.dumps(config).encode()]
    for model_type in REFUSED:
        out.append(json.dumps({**config, "model_type": model_type}).encode())
    return out


def one_input(data: bytes) -> None:
    folder = workdir() / "config"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_bytes(data)
    config = read_config(folder)
    assert isinstance(config, ModelConfig), config
