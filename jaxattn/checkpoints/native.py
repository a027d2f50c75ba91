"""The jaxattn checkpoint format: an orbax-checkpoint directory.

OUT_DIR/
  jaxattn.json       {"format": "jaxattn", "version": 1, "config": ModelConfig}
  params/            orbax PyTree checkpoint of the params tree
  tokenizer files    as the tokenizer's save_pretrained writes them
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from jaxattn.config import ModelConfig

MARKER = "jaxattn.json"
FORMAT_VERSION = 1


def is_native(path: Path) -> bool:
    return (path / MARKER).is_file()


def save(path: Path, config: ModelConfig, params: dict) -> None:
    """Write config and params (the caller saves the tokenizer beside them)."""
    import orbax.checkpoint as ocp

    path = path.resolve()
    path.mkdir(parents=True, exist_ok=True)
    with ocp.PyTreeCheckpointer() as ckpt:
        ckpt.save(path / "params", params, force=True)
    meta = {"format": "jaxattn", "version": FORMAT_VERSION, "config": config.to_dict()}
    (path / MARKER).write_text(json.dumps(meta, indent=2) + "\n")


def load(path: Path) -> tuple[ModelConfig, dict]:
    """Read a directory written by `save`.

    Raises:
      ValueError: an unknown format version.
      FileNotFoundError: the params directory is missing.
    """
    import orbax.checkpoint as ocp

    path = path.resolve()
    meta = json.loads((path / MARKER).read_text())
    if meta.get("format") != "jaxattn" or meta.get("version") != FORMAT_VERSION:
        raise ValueError(
            f"{path / MARKER}: unsupported checkpoint format "
            f"{meta.get('format')!r} version {meta.get('version')!r}"
        )
    if not (path / "params").is_dir():
        raise FileNotFoundError(f"{path} has no params/ directory")
    with ocp.PyTreeCheckpointer() as ckpt:
        params = ckpt.restore(path / "params")
    params = _to_numpy(params)
    return ModelConfig.from_dict(meta["config"]), params


def _to_numpy(tree):
    if isinstance(tree, dict):
        return {k: _to_numpy(v) for k, v in tree.items()}
    return np.asarray(tree)
