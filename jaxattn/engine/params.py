"""Checking a params tree against the shapes the model expects."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.config import ModelConfig
from jaxattn.engine.model import Encoder
from jaxattn.spec import CaptureSpec


def expected_shapes(config: ModelConfig) -> dict:
    """The encoder params' shapes, from an abstract init (no compute, no memory)."""
    # hidden_states of the last layer: every weight is used.
    spec = CaptureSpec(what=("hidden_states",), layers=(config.num_layers - 1,), heads=(0,))
    ids = jnp.zeros((4,), jnp.int32)
    tree = jax.eval_shape(
        lambda: Encoder(config).init(jax.random.key(0), ids, ids, ids > 0, spec)["params"]
    )
    return jax.tree.map(lambda s: tuple(s.shape), tree)


def check_params(config: ModelConfig, params: dict) -> None:
    """Raise ValueError naming the first param whose presence or shape is wrong."""
    want = _flatten(expected_shapes(config))
    have = {k: tuple(np.shape(v)) for k, v in _flatten(params).items()}
    for key in sorted(set(want) | set(have)):
        if key not in have:
            raise ValueError(f"params lack {key} (expected shape {want[key]})")
        if key not in want:
            raise ValueError(f"params have {key}, which the {config.family} model does not use")
        if have[key] != want[key]:
            raise ValueError(f"param {key} has shape {have[key]}, the config implies {want[key]}")


def _flatten(tree, prefix="") -> dict:
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out |= _flatten(v, f"{prefix}{k}/")
        else:
            out[f"{prefix}{k}"] = v
    return out
