"""Gemma 2 (model_type "gemma2") and Gemma 3's text model ("gemma3_text"): Llama's
decoder with Gemma's norms, scaled embeddings and local/global layers.

The differences from Llama (HF modeling_gemma2.py, modeling_gemma3.py, eager attention):
* the word embeddings are multiplied by sqrt(hidden_size), rounded to the table's
  dtype (ModelConfig.embed_scale);
* every RMSNorm scales by (1 + w) in float32 (ModelConfig.norm_offset = 1);
* pre- and post-norms around both blocks (ModelConfig.post_norms):
  h = x + post_attention_layernorm(attn(input_layernorm(x))),
  out = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)));
* a GeGLU MLP, down(gelu_pytorch_tanh(gate(x)) * up(x)) (hidden_activation);
* the logits are q.k * query_pre_attn_scalar^-1/2 (ModelConfig.query_scale), and
  Gemma 2 soft-caps them, cap * tanh(logits / cap) (attn_logit_softcapping;
  ModelConfig.attn_softcap): `scores` holds the capped logits, what softmax sees;
* local layers (layer_types "sliding_attention") see the sliding_window most recent
  keys, the query included (0 <= i - j < sliding_window); the others
  ("full_attention") every past key. Without layer_types, Gemma 2 alternates
  local, global, ... and Gemma 3 makes every sliding_window_pattern-th layer global;
* RoPE: Gemma 2 one base (rope_theta, and a Llama rope scaling if any) for every
  layer; Gemma 3 the full-attention layers' rope_parameters (rope_theta, default
  1e6, and its scaling, e.g. linear factor 8) and the sliding layers' own base
  (rope_local_base_freq, default 1e4) unscaled;
* head_dim is its own field (HF default 256), not D / H;
* Gemma 3 normalises each head's query and key over head_dim (q_norm, k_norm: RMSNorm
  with (1 + w)) before RoPE (ModelConfig.qk_norm).

Mapped with a note: final_logit_softcapping caps the LM head's logits, which only
the causal LM loss reads (ModelConfig.lm_softcap); Gemma 3's attn_logit_softcapping
is not applied by transformers' Gemma 3 attention, so neither here; hidden_act is
not read by transformers' Gemma (hidden_activation is). Refused (naming the field):
use_bidirectional_attention, a sliding layer without a sliding_window, layer_types
of another length or kind, Gemma 3 sliding layers with a rope scaling, and what
Llama refuses (unknown rope types or parameters, an odd head_dim,
num_key_value_heads not dividing the heads). The multimodal model_type "gemma3" is
refused by name (`REFUSED_MODEL_TYPES`). The LM head is the word embedding
(tie_word_embeddings, Gemma's default; else lm_head.weight), its logits soft-capped
by final_logit_softcapping (ModelConfig.lm_softcap): the causal LM loss of head
ablation."""

from __future__ import annotations

import dataclasses
import json

from jaxattn.checkpoints.families.llama import (
    INV_FREQ,
    KINDS,
    _derive,
    _positive,
    _rotary,
    _whole,
)
from jaxattn.checkpoints.family import Family
from jaxattn.checkpoints.layer_types import GLOBAL, LOCAL, checked
from jaxattn.errors import CheckpointError

REFUSED_MODEL_TYPES = {
    "gemma3": "is Gemma 3's multimodal model (a vision tower and a text model): jaxattn "
    "reads the text model alone, model_type gemma3_text (Gemma3ForCausalLM's config.json, "
    "or this config's text_config)"
}


def _layer_global(hf: dict, out: dict, source: str, pattern: int) -> tuple[bool, ...]:
    """Each layer's kind from layer_types, else from the sliding-window pattern (every
    pattern-th layer, counting from 1, is global: HF's default layer_types)."""
    layers = out.get("num_layers")
    types = hf.get("layer_types")
    if types is None:
        if not isinstance(layers, int):
            return ()
        types = [LOCAL if (i + 1) % pattern else GLOBAL for i in range(layers)]
    return tuple(t == GLOBAL for t in checked(types, layers, source))


def _window(hf: dict, kinds: tuple[bool, ...], source: str) -> int:
    window = hf.get("sliding_window")
    if not all(kinds) and window is None:
        raise CheckpointError(
            f"{source}: sliding_window is null, but layer_types has sliding layers"
        )
    if window is None:
        return 0
    window = _whole(source, "sliding_window", window)
    size = hf.get("sliding_window_size")  # older Gemma 2 files repeat it
    if size is not None and size != window:
        raise CheckpointError(
            f"{source}: sliding_window_size={json.dumps(size)} differs from sliding_window={window}"
        )
    return window


def _attention(out: dict, hf: dict, source: str, softcap: bool) -> None:
    """query_pre_attn_scalar, attn_logit_softcapping (Gemma 2) and the causal switch."""
    if hf.get("use_bidirectional_attention"):
        raise CheckpointError(
            f"{source}: use_bidirectional_attention=true is not supported: jaxattn computes "
            "Gemma's causal attention only"
        )
    out["query_scale"] = _positive(source, "query_pre_attn_scalar", hf["query_pre_attn_scalar"])
    cap = hf.get("attn_logit_softcapping")
    if softcap and cap is not None:
        out["attn_softcap"] = _positive(source, "attn_logit_softcapping", cap)
    final = hf.get("final_logit_softcapping")  # the LM head's logits (the causal LM loss)
    if final is not None:
        out["lm_softcap"] = _positive(source, "final_logit_softcapping", final)


def _derive_gemma2(out: dict, hf: dict, source: str) -> None:
    _derive(out, hf, source)  # Llama's: grouped heads, head_dim, one RoPE for every layer
    kinds = _layer_global(hf, out, source, 2)
    out["rotary"] = dataclasses.replace(
        out["rotary"], layer_global=kinds, local_window=_window(hf, kinds, source)
    )
    _attention(out, hf, source, softcap=True)


def _rope3(hf: dict, source: str) -> tuple[dict, dict]:
    """Gemma 3's (full, sliding) RoPE settings as HF's convert_rope_params_to_dict reads
    them: rope_parameters per layer type (transformers 5), or rope_theta, rope_scaling
    and rope_local_base_freq (older files)."""
    params, scaling = hf.get("rope_parameters"), hf.get("rope_scaling")
    if params is not None and scaling is not None:
        raise CheckpointError(
            f"{source}: both rope_parameters and rope_scaling are given; jaxattn reads one "
            "(transformers 5 writes rope_parameters, older files rope_scaling)"
        )
    if params is None:
        params = {GLOBAL: dict(scaling or {})}
    if not isinstance(params, dict) or set(params) - {GLOBAL, LOCAL}:
        raise CheckpointError(
            f"{source}: rope_parameters is {json.dumps(params)}, but it must be an object "
            f'with "{GLOBAL}" and "{LOCAL}" entries'
        )
    full, sliding = (dict(params.get(kind) or {}) for kind in (GLOBAL, LOCAL))
    full.setdefault("rope_theta", hf.get("rope_theta", 1_000_000.0))
    sliding.setdefault("rope_theta", hf.get("rope_local_base_freq", 10_000.0))
    return full, sliding


def _derive_gemma3(out: dict, hf: dict, source: str) -> None:
    heads = dict(out)  # Llama's grouped heads and head_dim; the RoPE is read below
    _derive(heads, {**hf, "rope_parameters": None, "rope_scaling": None}, source)
    out.update({k: v for k, v in heads.items() if k in ("num_kv_heads", "head_size")})
    full, sliding = _rope3(hf, source)
    rotary = _rotary({"rope_parameters": full}, out, f"{source}: {GLOBAL}")
    local = _rotary({"rope_parameters": sliding}, out, f"{source}: {LOCAL}")
    if local.scaling != "default":
        raise CheckpointError(
            f"{source}: rope_parameters.{LOCAL} has rope_type {json.dumps(local.scaling)}: "
            "jaxattn computes plain RoPE in Gemma 3's sliding layers"
        )
    pattern = hf.get("sliding_window_pattern", hf.get("_sliding_window_pattern", 6))
    kinds = _layer_global(hf, out, source, _whole(source, "sliding_window_pattern", pattern))
    out["rotary"] = dataclasses.replace(
        rotary,
        local_theta=local.global_theta,
        local_scaling=False,
        layer_global=kinds,
        local_window=_window(hf, kinds, source),
    )
    _attention(out, hf, source, softcap=False)


FIELDS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_positions",  # HF: RoPE cache size only
    "hidden_activation": "activation",
    "rms_norm_eps": "layer_norm_eps",
    "attention_bias": "attention_bias",
    # No effect on the captured forward:
    "pad_token_id": None,  # padding is masked, whatever id fills it
    "tie_word_embeddings": "tied_lm_head",
    "hidden_act": None,  # transformers' Gemma reads hidden_activation, not this
    "cache_implementation": None,  # generation's KV cache
}
FIXED = {
    "type_vocab_size": 0,
    "absolute_positions": False,
    "norm": "pre",
    "norm_type": "rms",
    "norm_bias": False,
    "embedding_norm": False,
    "ffn": "gated",
    "mlp_bias": False,
    "causal": True,
    "embed_scale": True,
    "norm_offset": 1.0,
    "post_norms": True,
}
# The config classes' defaults where ModelConfig's differ (Gemma2Config, Gemma3TextConfig).
DEFAULTS = {
    "rms_norm_eps": 1e-6,
    "hidden_activation": "gelu_pytorch_tanh",
    "attention_bias": False,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "query_pre_attn_scalar": 256,
    "sliding_window": 4096,
    "tie_word_embeddings": True,
}
DERIVED = frozenset(
    {
        "final_logit_softcapping",
        "num_key_value_heads",
        "head_dim",
        "rope_theta",
        "rope_scaling",
        "rope_parameters",
        "query_pre_attn_scalar",
        "attn_logit_softcapping",
        "sliding_window",
        "sliding_window_size",
        "layer_types",
        "use_bidirectional_attention",
    }
)
MODEL = {
    "embeddings/word": ("embed_tokens", "table", "VD"),
    "final_ln": ("norm", "ln", "D"),
}
LAYER = {
    "attention_ln": ("input_layernorm", "ln", "D"),
    "attention/query": ("self_attn.q_proj", "heads_in", "AD"),
    "attention/key": ("self_attn.k_proj", "kv_heads_in", "GD"),
    "attention/value": ("self_attn.v_proj", "kv_heads_in", "GD"),
    "attention/out": ("self_attn.o_proj", "heads_out", "DA"),
    "attention_post_ln": ("post_attention_layernorm", "ln", "D"),
    "ffn_ln": ("pre_feedforward_layernorm", "ln", "D"),
    "ffn_gate": ("mlp.gate_proj", "dense", "FD"),
    "ffn_in": ("mlp.up_proj", "dense", "FD"),
    "ffn_out": ("mlp.down_proj", "dense", "DF"),
    "ffn_post_ln": ("post_feedforward_layernorm", "ln", "D"),
}
COMMON = dict(
    fields=FIELDS,
    fixed=FIXED,
    prefixes=("model.",),
    model=MODEL,
    layer_key="layers.{}.",
    lm={"unembedding": ("lm_head", "table", "VD")},  # where tie_word_embeddings is false
    layer_ignored={"self_attn.rotary_emb.inv_freq": INV_FREQ},
    kinds=KINDS,
)

GEMMA2 = Family(
    name="gemma2",
    model_types=("gemma2",),
    hf_defaults={
        **DEFAULTS,
        "max_position_embeddings": 8192,
        "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
    },
    derive=_derive_gemma2,
    derived=DERIVED,
    layer=LAYER,
    **COMMON,
)

GEMMA3 = Family(
    name="gemma3",
    model_types=("gemma3_text",),
    hf_defaults={**DEFAULTS, "max_position_embeddings": 131_072},
    derive=_derive_gemma3,
    derived=DERIVED | {"rope_local_base_freq", "sliding_window_pattern", "_sliding_window_pattern"},
    layer={
        **LAYER,
        # Per-head q/k RMSNorm over head_dim, scale (1 + w), before RoPE (ModelConfig.qk_norm).
        "attention/query_norm": ("self_attn.q_norm", "ln", "K"),
        "attention/key_norm": ("self_attn.k_norm", "ln", "K"),
    },
    **{**COMMON, "fixed": {**FIXED, "qk_norm": True}},
)
