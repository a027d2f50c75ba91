"""The jaxattn checkpoint format: an orbax-checkpoint directory.

OUT_DIR/
  jaxattn.json       {"format": "jaxattn", "version": 1, "config": ModelConfig,
                      "eos_token_id": [ids] (where the source named them: `eos`)}
  params/            orbax PyTree checkpoint of the params tree
  tokenizer files    as the tokenizer's save_pretrained writes them
"""

from __future__ import annotations

import json
from pathlib import Path

from jaxattn.config import ModelConfig
from jaxattn.errors import CheckpointError

MARKER = "jaxattn.json"
FORMAT_VERSION = 1


def is_native(path: Path) -> bool:
    return (path / MARKER).is_file()


def save(
    path: Path, config: ModelConfig, params: dict, eos_ids: tuple[int, ...] | None = None
) -> None:
    """Write config and params (the caller saves the tokenizer beside them); `eos_ids`:
    the source's EOS ids (`jaxattn.checkpoints.eos.read_eos_ids`), None: none named."""
    import orbax.checkpoint as ocp

    path = path.resolve()
    path.mkdir(parents=True, exist_ok=True)
    with ocp.PyTreeCheckpointer() as ckpt:
        ckpt.save(path / "params", params, force=True)
    meta = {"format": "jaxattn", "version": FORMAT_VERSION, "config": config.to_dict()}
    if eos_ids is not None:
        meta["eos_token_id"] = list(eos_ids)
    (path / MARKER).write_text(json.dumps(meta, indent=2) + "\n")


def load(path: Path) -> tuple[ModelConfig, dict]:
    """Read a directory written by `save`.

    Raises:
      CheckpointError: jaxattn.json unreadable, of an unknown format version or
        with a bad config; params/ missing, damaged or of the wrong structure
        (each names the file or directory).
    """
    import orbax.checkpoint as ocp

    from jaxattn.checkpoints.hf_files import out_of_host_memory, short_reason

    path = path.resolve()
    config = read_config(path)
    if not (path / "params").is_dir():
        raise CheckpointError(
            f"{path} has {MARKER} but no params/ directory: the checkpoint is incomplete "
            "(convert it again)"
        )
    try:
        with ocp.PyTreeCheckpointer() as ckpt:
            params = ckpt.restore(path / "params")
    except Exception as e:  # orbax and tensorstore raise a different class per damage
        if out_of_host_memory(e):  # no damage: the host's memory (`loading.out_of_memory`)
            raise
        raise CheckpointError(
            f"{path / 'params'} is not a readable orbax checkpoint (damaged or incomplete?): "
            f"{short_reason(e)}"
        ) from e
    if not isinstance(params, dict) or not isinstance(params.get("encoder"), dict):
        raise CheckpointError(f"{path / 'params'} does not hold a jaxattn params tree")
    return config, _to_numpy(params)


def read_config(path: Path) -> ModelConfig:
    """The ModelConfig of the directory's jaxattn.json (no params read).

    Raises:
      CheckpointError: jaxattn.json unreadable, of an unknown format version or with a
        bad config.
    """
    from jaxattn.checkpoints.hf_files import read_json_object

    marker = path / MARKER
    meta = read_json_object(marker)
    if meta.get("format") != "jaxattn" or meta.get("version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{marker}: unsupported checkpoint format {meta.get('format')!r} version "
            f"{meta.get('version')!r}: this jaxattn reads format 'jaxattn' version "
            f"{FORMAT_VERSION}"
        )
    return _config(meta.get("config"), marker)


def _config(fields, marker: Path) -> ModelConfig:
    """The ModelConfig stored in jaxattn.json."""
    if not isinstance(fields, dict):
        raise CheckpointError(f'{marker} has no "config" object')
    try:
        return ModelConfig.from_dict(fields)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f'{marker}: its "config" is not a valid model config: {e}') from e


def _to_numpy(tree):
    """Numpy leaves, each `placeable` (placed on the CPU, not copied)."""
    from jaxattn.engine.aligned import placeable

    if isinstance(tree, dict):
        return {k: _to_numpy(v) for k, v in tree.items()}
    return placeable(tree)
