"""GPT-NeoX (model_type "gpt_neox": EleutherAI's Pythia suite, GPT-NeoX-20B): a pre-LN
decoder with partial rotary positions and a parallel residual.

The differences from BERT (Black et al. 2022; Biderman et al. 2023; HF
modeling_gpt_neox.py, eager attention):
* causal self-attention (ModelConfig.causal), RoPE in HF's rotate_half layout on
  the first part of each head only: the frequencies of dims = int(K * rotary_pct)
  dimensions (Pythia: 0.25), the first 2 ceil(dims / 2) dimensions rotated, the
  rest passed (`Rotary.partial`, `jaxattn.engine.rotary`), base rotary_emb_base;
* embeddings are the word table `embed_in` alone: no positions, no token types, no norm;
* pre-LN layers (LayerNorm with bias, layer_norm_eps) with a parallel residual when
  use_parallel_residual (Pythia, the default): out = x + attention(input_layernorm(x))
  + mlp(post_attention_layernorm(x)) (ModelConfig.parallel_residual); without it,
  h = x + attention(input_layernorm(x)), out = h + mlp(post_attention_layernorm(h));
  a final `final_layer_norm` after the last layer (HF's last hidden state);
* one fused projection `attention.query_key_value` [3 D, D] whose output is laid out
  per head, [H, 3, K]: head h's query, key and value are rows
  h 3K .. h 3K + K, + K .. + 2K, + 2K .. + 3K (HF's view(..., H, 3K).chunk(3)), split
  here by a reshape; then `attention.dense`, biases on both where attention_bias;
* a dense MLP with biases: dense_4h_to_h(act(dense_h_to_4h(x))), hidden_act (gelu);
* an untied next-token head `embed_out` (transformers 5 names the module lm_head and
  writes embed_out), or the word embedding when tie_word_embeddings.

RoPE settings as HF's GPTNeoXConfig reads them: rope_parameters (transformers 5:
rope_theta, partial_rotary_factor, rope_type) or the older rope_scaling, with
rotary_emb_base and rotary_pct where those lack them (defaults 10000 and 0.25).
Refused (naming the field): a rope_type other than default/linear/llama3/dynamic,
rotary_emb_base or rotary_pct contradicting rope_parameters, a fraction outside (0, 1]
or one that rotates no dimension or more than the head has.
"""

from __future__ import annotations

import dataclasses
import json

from jaxattn.checkpoints.families.llama import _positive, _rope_parameters, _rotary
from jaxattn.checkpoints.family import Family
from jaxattn.errors import CheckpointError

BUFFER = "the causal-mask buffer of older GPT-NeoX files: jaxattn builds the mask itself"
INV_FREQ = "the RoPE frequencies older GPT-NeoX files store: jaxattn computes them"
# GPTNeoXConfig's own names of the RoPE base and fraction -> the rope_parameters key.
OWN_NAMES = {"rotary_emb_base": "rope_theta", "rotary_pct": "partial_rotary_factor"}
DEFAULT_THETA = 10000.0  # GPTNeoXConfig's default_theta; its rotary_pct defaults to 0.25


def _derive(out: dict, hf: dict, source: str) -> None:
    """The RoPE settings (HF GPTNeoXConfig.convert_rope_params_to_dict): the rope dict's
    values, else rotary_emb_base / rotary_pct, else the defaults; a contradiction is
    refused naming both fields (HF would take the rope dict's silently). A fraction below
    1 that turns no dimension or more than the head has: ModelConfig refuses it."""
    own = {key: _positive(source, name, hf[name]) for name, key in OWN_NAMES.items() if name in hf}
    rope = {k: hf[k] for k in ("rope_parameters", "rope_scaling") if k in hf}
    theta = own.get("rope_theta", DEFAULT_THETA)
    found, field = _rope_parameters({**rope, "rope_theta": theta}, source)
    for name, key in OWN_NAMES.items():
        given = (hf.get(field) or {}).get(key)
        if key in own and given is not None and given != own[key]:
            raise CheckpointError(
                f"{source}: {name}={json.dumps(hf[name])} contradicts {field}.{key}="
                f"{json.dumps(given)}; jaxattn reads one value"
            )
    partial = found.pop("partial_rotary_factor", own.get("partial_rotary_factor", 0.25))
    if isinstance(partial, bool) or not isinstance(partial, int | float) or not 0 < partial <= 1:
        name = "rotary_pct" if "rotary_pct" in hf else f"{field}.partial_rotary_factor"
        raise CheckpointError(
            f"{source}: {name} is {json.dumps(partial)}, but it must be a number in (0, 1]"
        )
    rotary = _rotary({field: found}, out, source)
    out["rotary"] = dataclasses.replace(rotary, partial=float(partial))
    heads, hidden = out.get("num_heads"), out.get("hidden_size")
    if partial == 1 and isinstance(heads, int) and heads > 0 and (hidden // heads) % 2:
        raise CheckpointError(  # a fraction below 1: ModelConfig checks what it turns
            f"{source}: rotary_pct 1 of head size {hidden // heads}: RoPE turns pairs of "
            "dimensions, so a whole head must be even"
        )


def _qkv(i: int):
    """Our query/key/value (i = 0/1/2) kernel [D, H, K] or bias [H, K] of the fused
    query_key_value [3 D, D], whose rows are per head [H, 3, K]."""

    def kernel(w, c):  # [H 3 K, D] -> [H, 3, K, D] -> [D, H, K]
        per_head = w.reshape(c.num_heads, 3, c.head_dim, c.hidden_size)
        return per_head[:, i].transpose(2, 0, 1)

    def bias(b, c):
        return b.reshape(c.num_heads, 3, c.head_dim)[:, i]

    return {"kernel": ("weight", kernel, 2), "bias": ("bias", bias, 1)}


KINDS = {f"qkv_{name}": _qkv(i) for i, name in enumerate(("query", "key", "value"))}

GPT_NEOX = Family(
    name="gpt_neox",
    model_types=("gpt_neox",),
    fields={
        "vocab_size": "vocab_size",
        "hidden_size": "hidden_size",
        "num_hidden_layers": "num_layers",
        "num_attention_heads": "num_heads",
        "intermediate_size": "intermediate_size",
        "max_position_embeddings": "max_positions",  # HF: RoPE cache size only
        "hidden_act": "activation",
        "layer_norm_eps": "layer_norm_eps",
        "attention_bias": "attention_bias",
        "use_parallel_residual": "parallel_residual",
        "tie_word_embeddings": "tied_lm_head",
        # No effect on the eval forward:
        "pad_token_id": None,  # padding is masked, whatever id fills it
        "hidden_dropout": None,
    },
    # GPTNeoXConfig's defaults where ModelConfig's differ.
    hf_defaults={
        "layer_norm_eps": 1e-5,
        "max_position_embeddings": 2048,
        "use_parallel_residual": True,
        "tie_word_embeddings": False,
    },
    fixed={
        "type_vocab_size": 0,
        "absolute_positions": False,
        "norm": "pre",
        "embedding_norm": False,
        "causal": True,
    },
    derive=_derive,
    derived=frozenset({"rotary_emb_base", "rotary_pct", "rope_scaling", "rope_parameters"}),
    prefixes=("gpt_neox.",),
    model={
        "embeddings/word": ("embed_in", "table", "VD"),
        "final_ln": ("final_layer_norm", "ln", "D"),
    },
    layer_key="layers.{}.",
    layer={
        "attention_ln": ("input_layernorm", "ln", "D"),
        "attention/query": ("attention.query_key_value", "qkv_query", "QD"),
        "attention/key": ("attention.query_key_value", "qkv_key", "QD"),
        "attention/value": ("attention.query_key_value", "qkv_value", "QD"),
        "attention/out": ("attention.dense", "heads_out", "DA"),
        "ffn_ln": ("post_attention_layernorm", "ln", "D"),
        "ffn_in": ("mlp.dense_h_to_4h", "dense", "FD"),
        "ffn_out": ("mlp.dense_4h_to_h", "dense", "DF"),
    },
    lm={"unembedding": ("embed_out", "table", "VD")},
    layer_ignored={
        "attention.bias": BUFFER,
        "attention.masked_bias": BUFFER,
        "attention.rotary_emb.inv_freq": INV_FREQ,
    },
    kinds=KINDS,
)
