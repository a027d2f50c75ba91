"""Mistral (model_type "mistral"): Llama with a causal sliding window, no biases.

The differences from Llama (HF modeling_mistral.py, eager attention):
* sliding_window W (MistralConfig's default 4096 when config.json omits it;
  null: full causal attention): in every layer query i sees keys j with
  i - W < j <= i (masking_utils.sliding_window_causal_mask_function:
  kv_idx > q_idx - W and kv_idx <= q_idx), W keys counting itself; every other
  key gets exactly zero weight (`Rotary.local_window`, `layer_global`);
* no attention_bias or mlp_bias fields: q/k/v/o and gate/up/down have no biases;
* head_dim given (null: D / H), grouped-query heads and the RoPE settings as Llama
  (`llama._derive`).

Refused (naming the field): as Llama, and any field MistralConfig does not have
(layer_types, MoE fields such as num_local_experts, ...).
"""

from __future__ import annotations

import dataclasses
import json

from jaxattn.checkpoints.families.llama import LLAMA, _derive, _whole
from jaxattn.errors import CheckpointError


def window_of(source: str, key: str, value) -> int | None:
    """A sliding_window value: null (no window) or a whole number >= 1."""
    return None if value is None else _whole(source, key, value)


def slide(out: dict, window: int | None, layers) -> None:
    """Set the Rotary of `out` (from `llama._derive`) to slide `layers` over `window`:
    they become local layers with a causal window (`Rotary.local_window`), the
    others global (`Rotary.layer_global`)."""
    layers = frozenset(layers)
    if window is None or not layers:
        return
    every = range(out["num_layers"])
    out["rotary"] = dataclasses.replace(
        out["rotary"], local_window=window, layer_global=tuple(i not in layers for i in every)
    )


def _derive_mistral(out: dict, hf: dict, source: str) -> None:
    _derive(out, hf, source)
    window = window_of(source, "sliding_window", hf.get("sliding_window"))
    layers = out.get("num_layers")
    if isinstance(layers, int):
        slide(out, window, range(layers))


def bool_field(source: str, key: str, value) -> bool:
    if not isinstance(value, bool):
        raise CheckpointError(
            f"{source}: {key} is {json.dumps(value)}, but it must be true or false"
        )
    return value


MISTRAL = dataclasses.replace(
    LLAMA,
    name="mistral",
    model_types=("mistral",),
    fields={k: v for k, v in LLAMA.fields.items() if k not in ("attention_bias", "mlp_bias")},
    required={},  # MistralConfig has no pretraining_tp
    # MistralConfig's defaults where ModelConfig's differ.
    hf_defaults={
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "max_position_embeddings": 4096 * 32,
        "num_key_value_heads": 8,
        "sliding_window": 4096,
    },
    fixed={**LLAMA.fixed, "attention_bias": False, "mlp_bias": False},
    derive=_derive_mistral,
    derived=LLAMA.derived | {"sliding_window"},
)
