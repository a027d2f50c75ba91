"""Reading a local Hugging Face checkpoint directory (no hub, ever)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from jaxattn.checkpoints.hf_config import translate
from jaxattn.checkpoints.hf_weights import convert_state_dict
from jaxattn.config import ModelConfig

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


def read_state_dict(path: Path) -> dict[str, np.ndarray]:
    """The checkpoint's weights as numpy arrays.

    Reads model.safetensors, a sharded model.safetensors.index.json, or
    pytorch_model.bin (needs torch, imported only then).

    Raises:
      FileNotFoundError: none of the weight files exists (names them).
    """
    if (path / "model.safetensors").is_file():
        return _read_safetensors([path / "model.safetensors"])
    if (path / "model.safetensors.index.json").is_file():
        index = json.loads((path / "model.safetensors.index.json").read_text())
        shards = sorted(set(index["weight_map"].values()))
        for shard in shards:
            if not (path / shard).is_file():
                raise FileNotFoundError(f"{path}: shard {shard} named by the index is missing")
        return _read_safetensors([path / s for s in shards])
    if (path / "pytorch_model.bin").is_file():
        try:
            import torch
        except ImportError as e:
            raise ImportError(
                f"{path} holds pytorch_model.bin, which needs torch to read: "
                "pip install torch (CPU is enough), or convert it to safetensors"
            ) from e
        state = torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True)
        return {k: v.float().numpy() for k, v in state.items()}
    raise FileNotFoundError(f"{path} has no weights: expected one of {', '.join(WEIGHT_FILES)}")


def _read_safetensors(files: list[Path]) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    state: dict[str, np.ndarray] = {}
    for f in files:
        state.update(load_file(str(f)))
    return state


def read_config(path: Path, ignore_fields: tuple[str, ...] = ()) -> ModelConfig:
    """Translate the directory's config.json.

    Raises:
      FileNotFoundError: no config.json.
      ValueError: see `jaxattn.checkpoints.hf_config.translate`.
    """
    file = path / "config.json"
    if not file.is_file():
        raise FileNotFoundError(f"{path} has no config.json")
    hf = json.loads(file.read_text())
    name = hf.get("_name_or_path") or path.name
    return translate(hf, name=Path(str(name)).name or path.name, ignore_fields=ignore_fields)


def load_hf(path: Path, ignore_fields: tuple[str, ...] = ()) -> tuple[ModelConfig, dict]:
    """Config and params of a HF checkpoint directory."""
    config = read_config(path, ignore_fields)
    return config, convert_state_dict(read_state_dict(path), config)
