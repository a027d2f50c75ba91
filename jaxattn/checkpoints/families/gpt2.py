"""GPT-2 and DistilGPT-2 (model_type "gpt2"): a pre-LN decoder with causal attention.

The differences from BERT (Radford et al. 2019; HF modeling_gpt2.py):
* causal self-attention: query i sees keys j <= i (ModelConfig.causal);
* embeddings are the word table plus learned absolute positions (ids 0..T-1),
  with no LayerNorm and no token types;
* pre-LN layers: h = x + attn(ln_1(x)), out = h + mlp(ln_2(h)), ln_1 in every
  layer (layer 0 included), and a final ln_f after the last layer (HF's last
  hidden state and hidden_states[-1]);
* Conv1D weights, kept [in, out] (x W + b, no transpose): attn.c_attn [D, 3D]
  holds query, key and value as its column thirds, each head-major;
* the feed-forward width is n_inner, or 4 D when it is null; activation
  gelu_new (the tanh gelu).

Refused (naming the field): scale_attn_weights false (unscaled scores),
scale_attn_by_inverse_layer_idx true, reorder_and_upcast_attn true, and (as
for every family) add_cross_attention true. The LM head is tied to wte
(checked when the file has it) and not stored (ModelConfig.tied_lm_head).
"""

from __future__ import annotations

import json

from jaxattn.checkpoints.family import Family
from jaxattn.errors import CheckpointError

BUFFER = "the causal-mask buffer of older GPT-2 files: jaxattn builds the mask itself"


def _derive(out: dict, hf: dict, source: str) -> None:
    """The feed-forward width: n_inner, or 4 n_embd when it is null or absent (HF)."""
    inner = hf.get("n_inner")
    if inner is None:
        hidden = out.get("hidden_size")
        if isinstance(hidden, int):
            out["intermediate_size"] = 4 * hidden
        return
    if isinstance(inner, float) and inner.is_integer():
        inner = int(inner)
    if not isinstance(inner, int) or isinstance(inner, bool) or inner < 1:
        raise CheckpointError(
            f"{source}: n_inner is {json.dumps(inner)}, but it must be null or a whole number"
        )
    out["intermediate_size"] = inner


def _third(i: int):
    """Our query/key/value (i = 0/1/2) kernel [D, H, K] or bias [H, K] from c_attn's columns."""

    def kernel(w, c):
        return w[:, i * c.hidden_size : (i + 1) * c.hidden_size].reshape(
            c.hidden_size, c.num_heads, c.head_dim
        )

    def bias(b, c):
        return b[i * c.hidden_size : (i + 1) * c.hidden_size].reshape(c.num_heads, c.head_dim)

    return {"kernel": ("weight", kernel, 2), "bias": ("bias", bias, -1)}


def _ident(w, c):
    return w


def _heads_out(w, c):  # Conv1D [H*K, D] -> [H, K, D]
    return w.reshape(c.num_heads, c.head_dim, c.hidden_size)


KINDS = {
    **{f"c_attn_{name}": _third(i) for i, name in enumerate(("query", "key", "value"))},
    "conv1d": {"kernel": ("weight", _ident, 2), "bias": ("bias", _ident, -1)},
    "conv1d_heads_out": {"kernel": ("weight", _heads_out, 2), "bias": ("bias", _ident, -1)},
}

GPT2 = Family(
    name="gpt2",
    model_types=("gpt2",),
    fields={
        "vocab_size": "vocab_size",
        "n_embd": "hidden_size",
        "n_layer": "num_layers",
        "n_head": "num_heads",
        "n_positions": "max_positions",
        "activation_function": "activation",
        "layer_norm_epsilon": "layer_norm_eps",
        # No effect on the eval forward:
        "n_ctx": None,  # older files' copy of n_positions; HF reads n_positions
        "pad_token_id": None,  # GPT-2 has none; padding is masked, whatever id fills it
        "resid_pdrop": None,
        "embd_pdrop": None,
        "attn_pdrop": None,
        "summary_type": None,  # GPT2DoubleHeadsModel's multiple-choice head
        "summary_use_proj": None,
        "summary_activation": None,
        "summary_proj_to_labels": None,
        "summary_first_dropout": None,
        "_num_labels": None,
    },
    required={
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
    },
    # GPT2Config's defaults where ModelConfig's differ.
    hf_defaults={"layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"},
    fixed={
        "type_vocab_size": 0,
        "norm": "pre",
        "embedding_norm": False,
        "causal": True,
        "tied_lm_head": True,
    },
    derive=_derive,
    derived=frozenset({"n_inner"}),
    prefixes=("transformer.",),
    model={
        "embeddings/word": ("wte", "table", "VD"),
        "embeddings/position": ("wpe", "table", "PD"),
        "final_ln": ("ln_f", "ln", "D"),
    },
    layer_key="h.{}.",
    layer={
        "attention_ln": ("ln_1", "ln", "D"),
        "attention/query": ("attn.c_attn", "c_attn_query", "DQ"),
        "attention/key": ("attn.c_attn", "c_attn_key", "DQ"),
        "attention/value": ("attn.c_attn", "c_attn_value", "DQ"),
        "attention/out": ("attn.c_proj", "conv1d_heads_out", "DD"),
        "ffn_ln": ("ln_2", "ln", "D"),
        "ffn_in": ("mlp.c_fc", "conv1d", "DF"),
        "ffn_out": ("mlp.c_proj", "conv1d", "FD"),
    },
    tied="lm_head.weight",
    layer_ignored={"attn.bias": BUFFER, "attn.masked_bias": BUFFER},
    layers_field="n_layer",
    kinds=KINDS,
)
