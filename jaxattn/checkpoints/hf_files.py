"""Reading a local Hugging Face checkpoint directory (`hub` downloads one into the cache).

Every file is read here or in `native`, and every way a file can be bad (missing,
empty, cut short, not JSON, not safetensors) becomes one error that names the file:
ModelNotFoundError (a FileNotFoundError) for a missing one, CheckpointError for a
damaged one. The names of the files a checkpoint holds are here too, for `hub`.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import numpy as np

from jaxattn.checkpoints.hf_config import json_kind, translate
from jaxattn.checkpoints.hf_weights import convert_state_dict
from jaxattn.config import ModelConfig
from jaxattn.errors import CheckpointError, ModelNotFoundError

# The weights, in the order they are looked for: one file, a sharded one, PyTorch's.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
INDEX = "model.safetensors.index.json"
# The bytes of tensors copied out of one mapping of a safetensors file before it is closed
# and the file mapped again: the file's pages a mapping touched count in the process's RSS
# until it is closed (one mapping for the whole file held 2x the weights at its close),
# and each opening reads the whole header (opened once per tensor, a file of n tensors
# cost n^2: 12.5 s for 3000 tensors, 47 ms opened once).
MAPPED_BYTES = 64 << 20
# The files a fast tokenizer may be built from (`AutoTokenizer.from_pretrained`) ...
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "spm.model",
)
# ... of which it needs one of these (`jaxattn.engine.Tokenizer.from_dir`).
TOKENIZER_NEEDS = ("tokenizer.json", "vocab.txt", "vocab.json")


def read_json_object(file: Path) -> dict:
    """The JSON object in `file` (config.json, an index, tokenizer.json, jaxattn.json).

    Raises:
      CheckpointError: the file is not UTF-8, not JSON (with line and column), or
        holds something other than an object.
    """
    try:
        value = json.loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{file} is not UTF-8 text (byte {e.start}): is it damaged?") from e
    except json.JSONDecodeError as e:
        raise CheckpointError(
            f"{file} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})"
        ) from e
    except RecursionError:  # json's decoder recurses once per [ or {
        raise CheckpointError(f"{file} is not a usable JSON file: nested too deeply") from None
    except ValueError as e:  # a number of more than 4300 digits (int_max_str_digits)
        raise CheckpointError(f"{file} is not a usable JSON file: {e}") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{file} holds {json_kind(value)}, not a JSON object")
    return value


def short_reason(error: BaseException, limit: int = 160) -> str:
    """The first line of an error's message, cut to `limit` characters (library
    messages can run to pages), or its class name when it has none."""
    lines = str(error).strip().splitlines()
    text = lines[0] if lines else type(error).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def out_of_host_memory(error: BaseException) -> bool:
    """Whether `error` is the host's want of memory (a MemoryError, or an OSError ENOMEM:
    a mapping or buffer the host could not give), which the readers raise as it is, not
    as a damaged file: `jaxattn.checkpoints.loading.out_of_memory` names it."""
    return isinstance(error, MemoryError) or (
        isinstance(error, OSError) and error.errno == errno.ENOMEM
    )


def read_state_dict(path: Path) -> dict[str, np.ndarray]:
    """The checkpoint's weights as numpy arrays.

    Reads model.safetensors, a sharded model.safetensors.index.json, or
    pytorch_model.bin (needs torch, imported only then).

    Raises:
      ModelNotFoundError: none of the weight files exists (names them), or a shard
        the index names is missing.
      CheckpointError: a weights file or the index cannot be read (names it).
    """
    if (path / "model.safetensors").is_file():
        return _read_safetensors([path / "model.safetensors"])
    if (path / INDEX).is_file():
        return _read_safetensors(_shards(path / INDEX))
    if (path / "pytorch_model.bin").is_file():
        return _read_torch(path / "pytorch_model.bin")
    raise ModelNotFoundError(f"{path} has no weights: looked for {', '.join(WEIGHT_FILES)}")


def shard_names(index_file: Path) -> list[str]:
    """The shard file names a model.safetensors.index.json's weight_map names (sorted, once).

    Raises:
      CheckpointError: the index is not JSON, or has no weight_map object of
        tensor name -> shard file name.
    """
    weight_map = read_json_object(index_file).get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(
            f'{index_file} has no "weight_map" object of tensor name -> shard file name'
        )
    return sorted(set(weight_map.values()))


def _shards(index_file: Path) -> list[Path]:
    """The shard files a model.safetensors.index.json names, each checked present."""
    shards = [index_file.parent / s for s in shard_names(index_file)]
    for shard in shards:
        if not shard.is_file():
            raise ModelNotFoundError(f"{shard}, a shard named by {index_file.name}, is missing")
    return shards


def _read_safetensors(files: list[Path]) -> dict[str, np.ndarray]:
    import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy: bf16 checkpoints load)
    from safetensors import SafetensorError, safe_open

    state: dict[str, np.ndarray] = {}
    for f in files:
        _check_not_empty(f)
        try:
            names: list[str] | None = None
            done = 0
            while names is None or done < len(names):  # mapped again every `MAPPED_BYTES`
                with safe_open(str(f), framework="np") as opened:
                    names = list(opened.keys()) if names is None else names
                    copied = 0
                    while done < len(names) and copied < MAPPED_BYTES:
                        tensor = state[names[done]] = opened.get_tensor(names[done])
                        copied += tensor.nbytes
                        done += 1
        except (SafetensorError, OSError, TypeError, ValueError) as e:
            if out_of_host_memory(e):  # no damage: the host's memory
                raise
            raise CheckpointError(
                f"{f} is not a readable safetensors file (truncated or corrupt?): {short_reason(e)}"
            ) from e
    return state


def _read_torch(file: Path) -> dict[str, np.ndarray]:
    """A pytorch_model.bin state dict (tensors only: weights_only loading)."""
    try:
        import torch
    except ImportError as e:
        raise ImportError(
            f"{file.parent} holds pytorch_model.bin, which needs torch to read: "
            "pip install torch (CPU is enough), or convert it to safetensors"
        ) from e
    _check_not_empty(file)
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises a different class per kind of damage
        if out_of_host_memory(e):  # no damage: the host's memory
            raise
        raise CheckpointError(
            f"{file} is not a readable PyTorch weights file (truncated or corrupt?): "
            f"{_torch_reason(e)}"
        ) from e
    if not isinstance(state, dict):
        raise CheckpointError(f"{file} holds a {type(state).__name__}, not a state dict")
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(
                f"{file}: entry {key!r} is a {type(value).__name__}, not a tensor "
                "(a state dict of tensors is expected)"
            )
    # Each tensor let go once cast (a bfloat16 file's are not all held beside their casts).
    return {k: state.pop(k).float().numpy() for k in list(state)}


def _check_not_empty(file: Path) -> None:
    if file.stat().st_size == 0:
        raise CheckpointError(f"{file} is empty (0 bytes): was its download or copy cut short?")


def _torch_reason(error: Exception) -> str:
    """torch's reason, without its advice to load unsafely (weights_only=False runs
    whatever code a damaged or hostile file holds)."""
    text = str(error)
    if isinstance(error, EOFError):
        return "the file ends early"
    if not text.startswith("Weights only load failed"):
        return short_reason(error)
    detail = text.partition("WeightsUnpickler error:")[2].strip().splitlines()
    return "it holds something other than tensors" + (f" ({detail[0]})" if detail else "")


def read_config(path: Path, ignore_fields: tuple[str, ...] = ()) -> ModelConfig:
    """Translate the directory's config.json.

    Raises:
      ModelNotFoundError: no config.json.
      CheckpointError: config.json is unreadable, or see
        `jaxattn.checkpoints.hf_config.translate`.
    """
    file = path / "config.json"
    if not file.is_file():
        raise ModelNotFoundError(
            f"{path} has no config.json: a Hugging Face checkpoint directory holds "
            "config.json, the weights and the tokenizer files (a jaxattn one, jaxattn.json)"
        )
    hf = read_json_object(file)
    name = hf.get("_name_or_path")
    name = Path(name).name if isinstance(name, str) and name else path.name
    return translate(hf, name=name or path.name, ignore_fields=ignore_fields, source=str(file))


def load_hf(path: Path, ignore_fields: tuple[str, ...] = ()) -> tuple[ModelConfig, dict]:
    """Config and params of a HF checkpoint directory."""
    config = read_config(path, ignore_fields)
    return config, convert_state_dict(
        read_state_dict(path), config, config_file=str(path / "config.json"), consume=True
    )
