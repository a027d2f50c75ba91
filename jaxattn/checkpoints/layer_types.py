"""HF's `layer_types`: which layers attend to every key ("full_attention") and which
within a window ("sliding_attention"), as ModernBERT, Qwen2/Qwen3 and Gemma write it.

One check for every family that reads the field: a list, one known type per layer.
"""

from __future__ import annotations

import json

from jaxattn.errors import CheckpointError

GLOBAL, LOCAL = "full_attention", "sliding_attention"
LAYER_TYPES = (GLOBAL, LOCAL)


def checked(types, layers, source: str) -> list[str]:
    """`types` as read from config.json, checked: a list of LAYER_TYPES, one per layer.

    Args:
      types: config.json's layer_types (not None).
      layers: num_hidden_layers; not an int when that is itself missing (named
        elsewhere): then the length is not checked.
      source: the file, for messages.

    Raises:
      CheckpointError: not a list, a type jaxattn does not compute, or another length.
    """
    if not isinstance(types, list):
        raise CheckpointError(
            f"{source}: layer_types is {json.dumps(types)}, but it must be a list of "
            f'"{GLOBAL}" and "{LOCAL}", one per layer'
        )
    bad = sorted({json.dumps(t) for t in types if t not in LAYER_TYPES})
    if bad:
        raise CheckpointError(
            f"{source}: layer_types has {', '.join(bad)}, which jaxattn does not compute "
            f"(it reads {', '.join(LAYER_TYPES)})"
        )
    if isinstance(layers, int) and len(types) != layers:
        raise CheckpointError(
            f"{source}: layer_types names {len(types)} layers, but num_hidden_layers is {layers}"
        )
    return types
