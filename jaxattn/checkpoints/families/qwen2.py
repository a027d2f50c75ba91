"""Qwen2 (model_type "qwen2": Qwen2, Qwen2.5): Llama with q/k/v biases and optional
sliding layers.

The differences from Llama (HF modeling_qwen2.py and configuration_qwen2.py,
eager attention):
* q_proj, k_proj and v_proj have biases, o_proj none (ModelConfig.attention_out_bias
  False), the MLP none;
* sliding layers exactly as Qwen2Config.__post_init__ and Qwen2Model build them:
  the window W is sliding_window when use_sliding_window, else none; layer_types
  is config.json's, else layer i is "sliding_attention" when W is set and
  i >= max_window_layers, "full_attention" otherwise; a sliding layer's query i
  sees keys i - W < j <= i (masking_utils.sliding_window_causal_mask_function);
* Qwen2Config's defaults: rms_norm_eps 1e-6, max_position_embeddings 32768,
  num_key_value_heads 32, sliding_window 4096, max_window_layers 28.

Refused (naming the field): as Llama; a layer_types entry other than
full_attention/sliding_attention, or not one per layer; sliding layers without a
window (layer_types names sliding_attention while use_sliding_window is false:
transformers itself cannot build that mask); any field Qwen2Config does not have
(MoE fields of qwen2_moe, ...).
"""

from __future__ import annotations

import dataclasses

from jaxattn.checkpoints.families.llama import LLAMA, _derive, _whole
from jaxattn.checkpoints.families.mistral import bool_field, slide, window_of
from jaxattn.checkpoints.layer_types import GLOBAL, LOCAL, checked
from jaxattn.errors import CheckpointError


def sliding_layers(out: dict, hf: dict, source: str) -> None:
    """Qwen2/Qwen3's sliding layers (see the module's docstring) into out["rotary"]."""
    use = bool_field(source, "use_sliding_window", hf.get("use_sliding_window", False))
    window = window_of(source, "sliding_window", hf.get("sliding_window")) if use else None
    first = _whole(source, "max_window_layers", hf.get("max_window_layers", 28), least=0)
    layers = out.get("num_layers")
    if not isinstance(layers, int):
        return  # the missing size is named later
    types = hf.get("layer_types")
    if types is None:
        types = [LOCAL if window is not None and i >= first else GLOBAL for i in range(layers)]
    sliding = [i for i, t in enumerate(checked(types, layers, source)) if t == LOCAL]
    if sliding and window is None:
        raise CheckpointError(
            f"{source}: layer_types makes layers {sliding} sliding_attention, but there is no "
            "sliding window (use_sliding_window is false or sliding_window null): "
            "transformers cannot build their mask"
        )
    slide(out, window, sliding)


def _derive_qwen2(out: dict, hf: dict, source: str) -> None:
    _derive(out, hf, source)
    sliding_layers(out, hf, source)


SLIDING = frozenset({"use_sliding_window", "sliding_window", "max_window_layers", "layer_types"})
# Qwen2Config's and Qwen3Config's defaults where ModelConfig's differ.
QWEN_DEFAULTS = {
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "max_position_embeddings": 32768,
    "num_key_value_heads": 32,
}

QWEN2 = dataclasses.replace(
    LLAMA,
    name="qwen2",
    model_types=("qwen2",),
    fields={k: v for k, v in LLAMA.fields.items() if k not in ("attention_bias", "mlp_bias")},
    required={},  # Qwen2Config has no pretraining_tp
    hf_defaults=QWEN_DEFAULTS,
    fixed={**LLAMA.fixed, "attention_bias": True, "attention_out_bias": False, "mlp_bias": False},
    derive=_derive_qwen2,
    derived=LLAMA.derived | SLIDING,
)
