"""Llama (model_type "llama": Llama 2/3/3.1/3.2, SmolLM2, TinyLlama): a pre-RMSNorm decoder.

The differences from BERT (Touvron et al. 2023; HF modeling_llama.py, eager attention):
* causal self-attention (ModelConfig.causal) with grouped-query heads:
  num_key_value_heads (H_kv) key/value heads, query head h reads key/value head
  h // (H / H_kv) (HF repeat_kv);
* embeddings are the word table alone: no positions, no token types, no norm;
* pre-RMSNorm layers: h = x + o_proj attn(input_layernorm(x)),
  out = h + mlp(post_attention_layernorm(h)), and a final `norm` after the
  last layer (HF's last hidden state and hidden_states[-1]); RMSNorm is
  x * rsqrt(mean(x^2) + eps) * w in float32, no bias;
* RoPE on q and k (HF's rotate_half layout, `jaxattn.engine.rotary`) with
  rope_theta and the rope_type scalings "default", "linear", "llama3" and
  "dynamic" (dynamic NTK changes the frequencies only past
  max_position_embeddings, jaxattn's longest input: exactly the default ones);
* a SwiGLU MLP: down_proj(act(gate_proj(x)) * up_proj(x)) (ModelConfig.ffn "gated");
* head_dim given in the config (it need not be D / H), else D / H;
* no biases unless attention_bias (q/k/v/o) or mlp_bias (gate/up/down).

Refused (naming the field): a rope_type other than default/linear/llama3/dynamic
(yarn, longrope, ...), unknown rope parameters, pretraining_tp other
than 1, a head_dim that is odd, num_key_value_heads not dividing the heads.
The LM head: the word embedding when tie_word_embeddings (ModelConfig.tied_lm_head),
else lm_head.weight where the file has it (params "lm_head", for the causal LM loss).
"""

from __future__ import annotations

import json

from jaxattn.checkpoints.family import Family
from jaxattn.errors import CheckpointError
from jaxattn.positions import Rotary

ROPE_KEYS = {
    "default": frozenset(),
    "linear": frozenset({"factor"}),
    "dynamic": frozenset({"factor"}),  # dynamic NTK: see `_rotary`
    "llama3": frozenset(
        {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}
    ),
}
INV_FREQ = "the RoPE frequencies older Llama files store: jaxattn computes them from the config"


def _whole(source: str, key: str, value, least: int = 1) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise CheckpointError(
            f"{source}: {key} is {json.dumps(value)}, but it must be a whole number >= {least}"
        )
    return value


def _positive(source: str, key: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise CheckpointError(
            f"{source}: {key} is {json.dumps(value)}, but it must be a positive number"
        )
    return float(value)


def _rope_parameters(hf: dict, source: str) -> tuple[dict, str]:
    """The RoPE settings, as HF's standardize_rope_params reads them: rope_parameters
    (transformers 5), or rope_scaling and rope_theta (older files); and their field name."""
    params, scaling = hf.get("rope_parameters"), hf.get("rope_scaling")
    if params is not None and scaling is not None:
        raise CheckpointError(
            f"{source}: both rope_parameters and rope_scaling are given; jaxattn reads one "
            "(transformers 5 writes rope_parameters, older files rope_scaling)"
        )
    name = "rope_parameters" if params is not None else "rope_scaling"
    found = params if params is not None else scaling
    if found is None:
        found = {}
    if not isinstance(found, dict):
        raise CheckpointError(f"{source}: {name} is {json.dumps(found)}, but it must be an object")
    found = dict(found)
    if "type" in found:  # older files' name of rope_type
        found.setdefault("rope_type", found.pop("type"))
    found.setdefault("rope_theta", hf.get("rope_theta", 10000.0))
    return found, name


def _rotary(hf: dict, out: dict, source: str) -> Rotary:
    params, name = _rope_parameters(hf, source)
    kind = params.pop("rope_type", "default")
    theta = _positive(source, "rope_theta", params.pop("rope_theta"))
    if kind not in ROPE_KEYS:
        raise CheckpointError(
            f"{source}: {name}.rope_type={json.dumps(kind)} is not supported: jaxattn computes "
            f"the rope types {', '.join(ROPE_KEYS)}"
        )
    if params.get("partial_rotary_factor", 1.0) == 1.0:
        params.pop("partial_rotary_factor", None)
    unknown = sorted(set(params) - ROPE_KEYS[kind])
    if unknown:
        reads = ", ".join(sorted(ROPE_KEYS[kind])) or "none"
        raise CheckpointError(
            f"{source}: {name} has {', '.join(unknown)}, which jaxattn does not compute for "
            f"rope_type {json.dumps(kind)} (it reads {reads})"
        )
    if kind == "dynamic":
        # HF's dynamic NTK rescales only for sequences longer than max_position_embeddings
        # (dynamic_rope_update; at or below it, _compute_dynamic_ntk_parameters gives the
        # default frequencies), which is jaxattn's longest input (ModelConfig.max_length).
        if "factor" not in params:
            raise CheckpointError(f'{source}: {name} of rope_type "dynamic" lacks factor')
        _positive(source, f"{name}.factor", params["factor"])
        kind = "default"
    if kind == "default":
        return Rotary(global_theta=theta, local_theta=theta)
    if "factor" not in params:
        raise CheckpointError(f"{source}: {name} of rope_type {json.dumps(kind)} lacks factor")
    extra = {}
    if kind == "llama3":
        for key in ("low_freq_factor", "high_freq_factor"):
            if key not in params:
                raise CheckpointError(f"{source}: {name} of rope_type llama3 lacks {key}")
        low = _positive(source, f"{name}.low_freq_factor", params["low_freq_factor"])
        high = _positive(source, f"{name}.high_freq_factor", params["high_freq_factor"])
        if not high > low:
            raise CheckpointError(
                f"{source}: {name}.high_freq_factor ({high}) must exceed low_freq_factor ({low})"
            )
        original = params.get("original_max_position_embeddings", out.get("max_positions"))
        extra = dict(
            low_freq_factor=low,
            high_freq_factor=high,
            original_max_positions=_whole(
                source, f"{name}.original_max_position_embeddings", original
            ),
        )
    return Rotary(
        global_theta=theta,
        local_theta=theta,
        scaling=kind,
        factor=_positive(source, f"{name}.factor", params["factor"]),
        **extra,
    )


def _derive(out: dict, hf: dict, source: str) -> None:
    """Grouped-query heads, head_dim and the RoPE settings."""
    heads = out.get("num_heads")
    kv = hf.get("num_key_value_heads")
    if kv is not None:
        kv = _whole(source, "num_key_value_heads", kv)
        if isinstance(heads, int) and heads % kv:
            raise CheckpointError(
                f"{source}: num_key_value_heads={kv} does not divide num_attention_heads="
                f"{heads}: each key/value head serves an equal group of query heads"
            )
        out["num_kv_heads"] = kv
    head_dim = hf.get("head_dim")
    if head_dim is not None:
        head_dim = _whole(source, "head_dim", head_dim)
        if head_dim % 2:
            raise CheckpointError(
                f"{source}: head_dim={head_dim} is odd, but RoPE rotates pairs of dimensions"
            )
        out["head_size"] = head_dim
    out["rotary"] = _rotary(hf, out, source)


def _kv_heads_in(w, c):  # [H_kv*K, D] -> [D, H_kv, K]
    return w.T.reshape(c.hidden_size, c.kv_heads, c.head_dim)


def _kv_head_bias(b, c):
    return b.reshape(c.kv_heads, c.head_dim)


KINDS = {
    "kv_heads_in": {"kernel": ("weight", _kv_heads_in, 2), "bias": ("bias", _kv_head_bias, 1)},
}

LLAMA = Family(
    name="llama",
    model_types=("llama",),
    fields={
        "vocab_size": "vocab_size",
        "hidden_size": "hidden_size",
        "num_hidden_layers": "num_layers",
        "num_attention_heads": "num_heads",
        "intermediate_size": "intermediate_size",
        "max_position_embeddings": "max_positions",  # HF: RoPE cache size only
        "hidden_act": "activation",
        "rms_norm_eps": "layer_norm_eps",
        "attention_bias": "attention_bias",
        "mlp_bias": "mlp_bias",
        "tie_word_embeddings": "tied_lm_head",
        # No effect on the eval forward:
        "pad_token_id": None,  # padding is masked, whatever id fills it
    },
    required={"pretraining_tp": 1},
    # LlamaConfig's defaults where ModelConfig's differ.
    hf_defaults={
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": False,
    },
    fixed={
        "type_vocab_size": 0,
        "absolute_positions": False,
        "norm": "pre",
        "norm_type": "rms",
        "norm_bias": False,
        "embedding_norm": False,
        "ffn": "gated",
        "causal": True,
    },
    derive=_derive,
    derived=frozenset(
        {"num_key_value_heads", "head_dim", "rope_theta", "rope_scaling", "rope_parameters"}
    ),
    prefixes=("model.",),
    model={
        "embeddings/word": ("embed_tokens", "table", "VD"),
        "final_ln": ("norm", "ln", "D"),
    },
    layer_key="layers.{}.",
    layer={
        "attention_ln": ("input_layernorm", "ln", "D"),
        "attention/query": ("self_attn.q_proj", "heads_in", "AD"),
        "attention/key": ("self_attn.k_proj", "kv_heads_in", "GD"),
        "attention/value": ("self_attn.v_proj", "kv_heads_in", "GD"),
        "attention/out": ("self_attn.o_proj", "heads_out", "DA"),
        "ffn_ln": ("post_attention_layernorm", "ln", "D"),
        "ffn_gate": ("mlp.gate_proj", "dense", "FD"),
        "ffn_in": ("mlp.up_proj", "dense", "FD"),
        "ffn_out": ("mlp.down_proj", "dense", "DF"),
    },
    lm={"unembedding": ("lm_head", "table", "VD")},
    layer_ignored={"self_attn.rotary_emb.inv_freq": INV_FREQ},
    kinds=KINDS,
)
