"""`convert_checkpoint`: a HF BERT/RoBERTa/DistilBERT directory -> a jaxattn (orbax) one.

from jaxattn.checkpoints import convert_checkpoint
convert_checkpoint("hf_dir", "out_dir")   # jaxattn.load("out_dir") reads it back
"""

from __future__ import annotations

import os
from pathlib import Path


def convert_checkpoint(
    hf_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    ignore_config_fields: tuple[str, ...] = (),
) -> Path:
    """Convert a local HF checkpoint into an orbax jaxattn checkpoint directory.

    Writes params (orbax), config (jaxattn.json) and the tokenizer files.

    Raises:
      FileNotFoundError / ValueError: as `jaxattn.load` does for the input.
    """
    from jaxattn.checkpoints import native
    from jaxattn.checkpoints.loading import read_checkpoint
    from jaxattn.engine import Tokenizer
    from jaxattn.engine.params import check_params

    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    config, params = read_checkpoint(hf_dir, ignore_config_fields)
    check_params(config, params["encoder"])
    tokenizer = Tokenizer.from_dir(hf_dir, config)
    native.save(out_dir, config, params)
    tokenizer.save(out_dir)
    return out_dir
