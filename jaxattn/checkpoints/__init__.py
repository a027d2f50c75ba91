"""Checkpoints: a model directory or a Hugging Face Hub name in, an `Engine` out.

    from jaxattn.checkpoints import load, convert_checkpoint
    engine = load("path/to/hf_checkpoint")      # = jaxattn.load
    engine = load("org/name@v1.0")              # from the Hub, into the Hugging Face cache
    convert_checkpoint("hf_dir", "out_dir")     # HF -> jaxattn (orbax); load("out_dir")

Modules: `hf_config` (config.json -> ModelConfig, a total field table),
`hf_weights` (HF state dict -> params, a total name table: HF's names live only
there), `hf_files` (reading a HF directory: safetensors, sharded or .bin),
`native` (the jaxattn orbax format), `model_ref` (the grammar of a model's name:
a directory, or NAME[@REVISION] on the Hub), `hub` and `hub_errors` (Hub models
through huggingface_hub), `loading` (`load`, `read_checkpoint`, the embedded
default model), `convert` (`convert_checkpoint`), `family` (`Family`: a checkpoint
family as data) and `families/` (one table file per family), `layer_types` (HF's
full and sliding-window layers), `tokenizer_cache` (each checkpoint's tokenizer,
kept beside the compiled programs so a load needs no transformers), `eos` (the
EOS ids generation stops at, as transformers' generate reads them:
generation_config.json, else config.json).
Importing this package imports no jax and no huggingface_hub; `load` does.

Errors: ModelNotFoundError (a FileNotFoundError) / NotAModelDirectoryError (a
NotADirectoryError) for a path, file, Hub model or revision that is not there
(named); HubError when the Hub does not deliver (unreachable, gated, cut off, a
full disk); CheckpointError for a file that is damaged (named: not JSON with its line
and column, not safetensors, cut short) or files that contradict each other (a
config.json field of the wrong type, a tensor whose shape the config contradicts,
with both shapes); `convert_checkpoint` raises UsageError for an output it would
overwrite and never leaves a half-written one.
"""

from jaxattn.checkpoints.convert import convert_checkpoint
from jaxattn.checkpoints.loading import (
    DEFAULT_MODEL_NAME,
    default_model_dir,
    load,
    read_checkpoint,
)

__all__ = [
    "DEFAULT_MODEL_NAME",
    "convert_checkpoint",
    "default_model_dir",
    "load",
    "read_checkpoint",
]
