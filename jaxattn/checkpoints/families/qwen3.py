"""Qwen3 (model_type "qwen3"): Llama with per-head q/k RMSNorm and Qwen2's sliding layers.

The differences from Llama (HF modeling_qwen3.py, eager attention):
* q_norm and k_norm: each head's query and key pass an RMSNorm over head_dim
  (one weight [head_dim] per layer for each, eps rms_norm_eps) before RoPE
  (ModelConfig.qk_norm; HF Qwen3Attention);
* attention_bias gives q/k/v/o biases (default false), the MLP has none;
* head_dim defaults to 128 when config.json omits it (Qwen3Config), not D / H;
* sliding layers as Qwen2's (`qwen2.sliding_layers`).

Refused (naming the field): as Qwen2; MoE fields (qwen3_moe is another model_type).
"""

from __future__ import annotations

import dataclasses

from jaxattn.checkpoints.families.qwen2 import QWEN2, QWEN_DEFAULTS

QWEN3 = dataclasses.replace(
    QWEN2,
    name="qwen3",
    model_types=("qwen3",),
    fields={**QWEN2.fields, "attention_bias": "attention_bias"},
    hf_defaults={**QWEN_DEFAULTS, "head_dim": 128, "attention_bias": False},
    # attention_bias comes from the config (q/k/v/o alike), not Qwen2's fixed q/k/v biases.
    fixed={
        **{k: v for k, v in QWEN2.fixed.items() if k != "attention_bias"},
        "attention_out_bias": True,
        "qk_norm": True,
    },
    layer={
        **QWEN2.layer,
        "attention/query_norm": ("self_attn.q_norm", "ln", "K"),
        "attention/key_norm": ("self_attn.k_norm", "ln", "K"),
    },
)
