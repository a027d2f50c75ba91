"""jaxattn: see inside a transformer's attention, an encoder's or a decoder's.

    import jaxattn
    engine = jaxattn.load()                      # embedded all-MiniLM-L6-v2
    caps = engine.capture(
        ["I went to the store.",
         ("I went to the store.", "At the store, I bought fresh strawberries.")],
        what=("attention", "alpha_fx_norm"))
    caps[1].attention                            # numpy [L, H, T, T]
    caps[1].tokens, caps[1].sentence_b_start

Public names: `load`, `Engine`, `Capture`, `CaptureSource`, `CaptureSpec`,
`ModelConfig`, `ModelInfo`, `QUANTITIES`, `OUTPUT_DTYPES`, `HeadAblation`,
`head_ablation_study`, `convert_checkpoint`, `open_store`, `CaptureStream`, and
the errors (`JaxattnError` and its subclasses, `jaxattn.errors`). The
subpackages users reach for, `jaxattn.analysis`, `jaxattn.views`,
`jaxattn.client`, `jaxattn.inputs`, are imported on first use.

The package, in the order data flows: `inputs/` (files -> texts), the numpy-only
contract (the modules at the top), `engine/` (texts -> Captures, where jax
computes), `checkpoints/` (a model directory or Hub name -> an Engine), `wire/` and
`client/` (Captures over gRPC), `analysis/`, `views/`, `store/`, `dump/`, `bench/`,
`cli/`. The map, one row per room: docs/reference/architecture.md.

Importing jaxattn does not import jax: `load`, `Engine` and the other engine
names are resolved on first use, so the client and the analyses run where only
numpy is installed.
"""

import importlib

from jaxattn.capture import Capture
from jaxattn.config import ModelConfig
from jaxattn.dtypes import OUTPUT_DTYPES
from jaxattn.errors import (
    CaptureFileError,
    CheckpointError,
    DeviceMemoryError,
    GatedModelError,
    HostMemoryError,
    HubError,
    HubUnreachableError,
    InputError,
    JaxattnError,
    ModelNotFoundError,
    NotAModelDirectoryError,
    ServerError,
    TooLongError,
    UsageError,
)
from jaxattn.info import ModelInfo, jaxattn_version
from jaxattn.quantities import QUANTITIES
from jaxattn.source import CaptureSource
from jaxattn.spec import CaptureSpec
from jaxattn.stream import CaptureStream

__version__ = jaxattn_version()  # "unknown" in a bare source tree, not installed

_LAZY = {
    "load": ("jaxattn.checkpoints.loading", "load"),
    "convert_checkpoint": ("jaxattn.checkpoints.convert", "convert_checkpoint"),
    "Engine": ("jaxattn.engine", "Engine"),
    "HeadAblation": ("jaxattn.engine", "HeadAblation"),
    "head_ablation_study": ("jaxattn.engine", "head_ablation_study"),
    "open_store": ("jaxattn.store", "open_store"),
}

# Subpackages reachable as attributes after a plain `import jaxattn` (none imports jax).
_SUBPACKAGES = ("analysis", "client", "inputs", "views")


def __getattr__(name):
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    if name in _SUBPACKAGES:
        return importlib.import_module(f"jaxattn.{name}")
    raise AttributeError(f"module 'jaxattn' has no attribute {name!r}")


__all__ = [
    "Capture",
    "CaptureFileError",
    "CaptureSource",
    "CaptureSpec",
    "CaptureStream",
    "CheckpointError",
    "DeviceMemoryError",
    "HostMemoryError",
    "Engine",
    "GatedModelError",
    "HeadAblation",
    "HubError",
    "HubUnreachableError",
    "InputError",
    "JaxattnError",
    "ModelNotFoundError",
    "NotAModelDirectoryError",
    "ServerError",
    "TooLongError",
    "UsageError",
    "ModelConfig",
    "ModelInfo",
    "OUTPUT_DTYPES",
    "QUANTITIES",
    "convert_checkpoint",
    "head_ablation_study",
    "load",
    "open_store",
]
