"""`convert_checkpoint`: a local HF checkpoint directory -> a jaxattn (orbax) one.

from jaxattn.checkpoints import convert_checkpoint
convert_checkpoint("hf_dir", "out_dir")   # jaxattn.load("out_dir") reads it back

The output is written to a temporary directory beside OUT_DIR and renamed into
place only once complete, so a convert that fails or is interrupted leaves no
half-written OUT_DIR (and, with overwrite=True, the old one untouched).
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path

from jaxattn.errors import ModelNotFoundError, UsageError


def convert_checkpoint(
    hf_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    ignore_config_fields: tuple[str, ...] = (),
    overwrite: bool = False,
) -> Path:
    """Convert a local HF checkpoint into an orbax jaxattn checkpoint directory.

    Writes params (orbax), config (jaxattn.json, with the EOS ids generation stops at:
    `jaxattn.checkpoints.eos`) and the tokenizer files.

    Args:
      hf_dir: the checkpoint to read (a jaxattn one works too).
      out_dir: the directory to write: absent or empty, unless `overwrite`.
      ignore_config_fields: config.json fields you vouch do not change the computation.
      overwrite: replace an existing, non-empty out_dir (only once the new one is
        complete).

    Raises:
      UsageError: out_dir is hf_dir, lies inside it or holds it, is a file, or
        exists and is not empty without `overwrite`.
      ModelNotFoundError / NotAModelDirectoryError / CheckpointError: as `jaxattn.load`
        does for the input (a Hub name that is no local directory: download it first).
    """
    from jaxattn.checkpoints.loading import check_model_dir
    from jaxattn.checkpoints.model_ref import is_hub_name

    # "bert-base-uncased" (as given: "./x" is a path, and so is any Path): no Hub here
    if isinstance(hf_dir, str) and is_hub_name(hf_dir) and not Path(hf_dir).exists():
        raise ModelNotFoundError(
            f"no checkpoint directory {hf_dir}: convert reads a local directory, not a "
            f"Hugging Face Hub name; download the model first (hf download {hf_dir} "
            "--local-dir DIR) and convert DIR"
        )
    hf_dir, out_dir = Path(hf_dir), Path(os.path.abspath(out_dir))  # "." has a name then
    check_model_dir(hf_dir)
    check_out_dir(hf_dir, out_dir, overwrite)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # mkdir, not mkdtemp: the output gets the usual permissions (mkdtemp's are 0700).
    partial = out_dir.parent / f".{out_dir.name}.partial-{os.getpid()}-{secrets.token_hex(4)}"
    partial.mkdir()
    try:
        _write(hf_dir, partial, ignore_config_fields)
        _move_into_place(partial, out_dir)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return out_dir


def check_out_dir(hf_dir: Path, out_dir: Path, overwrite: bool) -> None:
    """Refuse an output directory that would destroy the input or an existing output."""
    src, out = hf_dir.resolve(), out_dir.resolve()
    if out == src or out.is_relative_to(src):
        raise UsageError(
            f"output directory {out_dir} is inside the checkpoint {hf_dir} being converted: "
            "choose a directory outside it"
        )
    if src.is_relative_to(out):
        raise UsageError(
            f"output directory {out_dir} holds the checkpoint {hf_dir} being converted: "
            "choose another directory"
        )
    if out.exists() and not out.is_dir():
        raise UsageError(f"output path {out_dir} is a file, not a directory: choose another path")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise UsageError(
            f"output directory {out_dir} exists and is not empty: choose another directory "
            "or replace it (--overwrite / overwrite=True)"
        )


def _write(hf_dir: Path, out_dir: Path, ignore_config_fields: tuple[str, ...]) -> None:
    """Read, check and write the whole checkpoint into `out_dir` (an existing directory)."""
    from jaxattn.checkpoints import native
    from jaxattn.checkpoints.eos import read_eos_ids
    from jaxattn.checkpoints.loading import out_of_memory, read_checkpoint, read_tokenizer
    from jaxattn.checkpoints.model_ref import Resolved
    from jaxattn.engine.params import check_params

    try:
        config, params = read_checkpoint(hf_dir, ignore_config_fields)
    except Exception as e:  # out of memory: named as load names it, not the capture's advice
        memory = out_of_memory(Resolved(hf_dir), e)
        if memory is None:
            raise
        raise memory from e
    check_params(config, params["encoder"])
    eos_ids = read_eos_ids(hf_dir) if config.causal else None  # an encoder generates none
    tokenizer = read_tokenizer(hf_dir, config)
    native.save(out_dir, config, params, eos_ids)
    tokenizer.save(out_dir)


def _move_into_place(partial: Path, out_dir: Path) -> None:
    """Rename the complete `partial` to `out_dir`, replacing what is there only now."""
    if not out_dir.exists():
        partial.rename(out_dir)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
    out_dir.rename(old / "out")
    try:
        partial.rename(out_dir)
    except BaseException:
        (old / "out").rename(out_dir)  # put the previous output back
        old.rmdir()
        raise
    shutil.rmtree(old, ignore_errors=True)
