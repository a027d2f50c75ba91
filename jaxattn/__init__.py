"""jaxattn: see inside a transformer encoder's attention.

    import jaxattn
    engine = jaxattn.load()                      # embedded all-MiniLM-L6-v2
    caps = engine.capture(
        ["I went to the store.",
         ("I went to the store.", "At the store, I bought fresh strawberries.")],
        what=("attention", "alpha_fx_norm"))
    caps[1].attention                            # numpy [L, H, T, T]
    caps[1].tokens, caps[1].sentence_b_start

Public names: `load`, `Engine`, `Capture`, `CaptureSpec`, `ModelConfig`,
`ModelInfo`, `QUANTITIES`, `ENCODINGS`, `convert_checkpoint`.

Importing jaxattn does not import jax: `load`, `Engine` and
`convert_checkpoint` are resolved on first use, so the client and the analyses
run where only numpy is installed.
"""

import importlib

from jaxattn.capture import Capture
from jaxattn.config import ModelConfig, ModelInfo
from jaxattn.encodings import ENCODINGS
from jaxattn.quantities import QUANTITIES
from jaxattn.spec import CaptureSpec

_LAZY = {
    "load": ("jaxattn.loading", "load"),
    "Engine": ("jaxattn.engine", "Engine"),
    "convert_checkpoint": ("jaxattn.convert", "convert_checkpoint"),
    "open_store": ("jaxattn.store", "open_store"),
}


def __getattr__(name):
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'jaxattn' has no attribute {name!r}")


__all__ = [
    "Capture",
    "CaptureSpec",
    "ENCODINGS",
    "Engine",
    "ModelConfig",
    "ModelInfo",
    "QUANTITIES",
    "convert_checkpoint",
    "load",
]
