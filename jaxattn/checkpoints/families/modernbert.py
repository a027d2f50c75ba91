"""ModernBERT (model_type "modernbert"): a pre-LN encoder with RoPE, GeGLU and local windows.

The differences from BERT (Warner et al. 2024; HF modeling_modernbert.py):
* embeddings are the word table and a LayerNorm: no positions, no token types;
* pre-LN layers: h = x + attn(LN_a(x)), out = h + ffn(LN_f(h)); layer 0 has
  no LN_a (HF's Identity: the embeddings end in a LayerNorm) and a final
  LayerNorm follows the last layer (HF final_norm, included in HF's last
  hidden state);
* one fused projection Wqkv [3D, D]: query, key and value are its thirds, each
  head-major; q and k are rotated (RoPE, rotate_half layout) with
  rope_parameters' full_attention theta in global layers and
  sliding_attention theta in local ones (`jaxattn.engine.rotary`);
* layer i is global when i % n == 0 (HF layer_types, or
  global_attn_every_n_layers = n), else local: query i sees only keys j with
  |i - j| <= local_attention // 2, every other key gets exactly zero weight;
* a GeGLU FFN: [u, g] = Wi LN_f(h) (u the first F outputs), Wo (act(u) * g);
* LayerNorms without bias unless norm_bias, Linears without bias unless
  attention_bias / mlp_bias.

Refused (naming the field): a layer_types pattern that is not "global every n
layers from layer 0", rope types other than "default", rope_scaling, unknown
rope_parameters keys, a negative local_attention, a sliding_window that is not
local_attention // 2, a head_dim other than hidden_size / num_attention_heads.
The MLM head is not loaded (see HEAD).
"""

from __future__ import annotations

import json

from jaxattn.checkpoints.family import Family
from jaxattn.checkpoints.layer_types import GLOBAL, LOCAL, checked
from jaxattn.errors import CheckpointError
from jaxattn.positions import Rotary

THETAS = {GLOBAL: ("global_rope_theta", 160000.0), LOCAL: ("local_rope_theta", 10000.0)}
HEAD = (
    "ModernBERT's MLM/classifier head (head.dense, head.norm, decoder): not loaded, as its "
    "biases follow classifier_bias/norm_bias/decoder_bias; no capture uses it"
)


def _unsupported(source: str, key: str, value, supported: str):
    return CheckpointError(
        f"{source}: {key}={json.dumps(value)} is not supported: jaxattn computes {supported}"
    )


def _whole(source: str, key: str, value) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise CheckpointError(
            f"{source}: {key} is {json.dumps(value)}, but it must be a whole number"
        )
    return value


def _global_every(hf: dict, layers, source: str) -> int:
    """n such that layer i is global iff i % n == 0 (HF layer_types wins over the BC field)."""
    types = hf.get("layer_types")
    if types is None:
        every = _whole(
            source, "global_attn_every_n_layers", hf.get("global_attn_every_n_layers", 3)
        )
        if every < 1:
            raise _unsupported(source, "global_attn_every_n_layers", every, "a value >= 1")
        return every
    types = checked(types, layers, source)
    full = [i for i, t in enumerate(types) if t == GLOBAL]
    every = full[1] if len(full) > 1 else max(len(types), 1)
    if types != [GLOBAL if i % every == 0 else LOCAL for i in range(len(types))]:
        raise _unsupported(
            source,
            "layer_types",
            types,
            f'only "{GLOBAL}" in layers 0, n, 2n, ... and "{LOCAL}" elsewhere, for one n >= 1 '
            "(HF's global_attn_every_n_layers pattern)",
        )
    return every


def _thetas(hf: dict, source: str) -> dict[str, float]:
    """The RoPE base of global and local layers, as ModernBertConfig resolves them."""
    if hf.get("rope_scaling") is not None:
        raise _unsupported(source, "rope_scaling", hf["rope_scaling"], "only plain RoPE (null)")
    rope = hf.get("rope_parameters")
    rope = {} if rope is None else rope
    if not isinstance(rope, dict) or set(rope) - {GLOBAL, LOCAL}:
        raise _unsupported(
            source, "rope_parameters", rope, f'an object with "{GLOBAL}" and "{LOCAL}" entries'
        )
    thetas = {}
    for kind, (legacy, default) in THETAS.items():
        entry = rope.get(kind) or {}  # absent: HF fills it with the default type
        key = f"rope_parameters.{kind}"
        if not isinstance(entry, dict) or set(entry) - {"rope_type", "rope_theta"}:
            raise _unsupported(source, key, entry, "only the keys rope_type and rope_theta")
        if entry.get("rope_type", "default") != "default":
            raise _unsupported(
                source,
                f"{key}.rope_type",
                entry["rope_type"],
                'only rope_type "default" (plain RoPE)',
            )
        theta = entry.get("rope_theta", hf.get(legacy, default))  # HF: setdefault from legacy
        name = f"{key}.rope_theta" if "rope_theta" in entry else legacy
        if isinstance(theta, bool) or not isinstance(theta, int | float) or not theta > 0:
            raise CheckpointError(
                f"{source}: {name} is {json.dumps(theta)}, but it must be a positive number"
            )
        thetas[kind] = float(theta)
    return thetas


def _derive(out: dict, hf: dict, source: str) -> None:
    """The rotary settings (bases, global/local pattern, window) from ModernBERT's fields."""
    window = _whole(source, "local_attention", hf["local_attention"])
    if window < 0:
        raise _unsupported(source, "local_attention", window, "a window >= 0")
    if "sliding_window" in hf and hf["sliding_window"] != window // 2:
        raise _unsupported(
            source,
            "sliding_window",
            hf["sliding_window"],
            f"only local_attention // 2 = {window // 2}",
        )
    heads, hidden = out.get("num_heads"), out.get("hidden_size")
    if hf.get("head_dim") is not None and heads and hidden and hf["head_dim"] != hidden // heads:
        even = f"only hidden_size / num_attention_heads = {hidden // heads}"
        raise _unsupported(source, "head_dim", hf["head_dim"], even)
    thetas = _thetas(hf, source)
    out["rotary"] = Rotary(
        global_theta=thetas[GLOBAL],
        local_theta=thetas[LOCAL],
        global_every=_global_every(hf, out.get("num_layers"), source),
        local_window=window,
    )


def _third(i: int, bias: bool):
    """Our query/key/value (i = 0/1/2) kernel [D, H, K] or bias [H, K] from Wqkv's rows."""

    def take(w, c):
        part = w[i * c.hidden_size : (i + 1) * c.hidden_size]
        if bias:
            return part.reshape(c.num_heads, c.head_dim)
        return part.T.reshape(c.hidden_size, c.num_heads, c.head_dim)

    return take


KINDS = {
    f"wqkv_{name}": {
        "kernel": ("weight", _third(i, False), 2),
        "bias": ("bias", _third(i, True), 1),
    }
    for i, name in enumerate(("query", "key", "value"))
}

MODERNBERT = Family(
    name="modernbert",
    model_types=("modernbert",),
    fields={
        "vocab_size": "vocab_size",
        "hidden_size": "hidden_size",
        "num_hidden_layers": "num_layers",
        "num_attention_heads": "num_heads",
        "intermediate_size": "intermediate_size",
        "max_position_embeddings": "max_positions",  # HF: RoPE cache size only
        "hidden_activation": "activation",
        "norm_eps": "layer_norm_eps",
        "norm_bias": "norm_bias",
        "attention_bias": "attention_bias",
        "mlp_bias": "mlp_bias",
        "pad_token_id": "pad_token_id",
        # No effect on the encoder's eval forward:
        "initializer_cutoff_factor": None,
        "embedding_dropout": None,
        "mlp_dropout": None,
        "deterministic_flash_attn": None,  # flash kernels only
        "reference_compile": None,  # torch.compile switch of older versions
        "repad_logits_with_grad": None,  # older versions' unpadded MLM path
        "sparse_prediction": None,  # filters MLM rows only when labels are given
        "sparse_pred_ignore_index": None,
        "classifier_pooling": None,  # the heads (see HEAD)
        "classifier_bias": None,
        "classifier_activation": None,
        "decoder_bias": None,
        "layer_norm_eps": None,  # in hub configs; ModernBERT reads norm_eps
        "position_embedding_type": None,  # in hub configs; ModernBERT ignores it
    },
    # ModernBertConfig's defaults where ModelConfig's differ.
    hf_defaults={
        "norm_eps": 1e-5,
        "norm_bias": False,
        "attention_bias": False,
        "mlp_bias": False,
        "pad_token_id": 50283,
        "local_attention": 128,
    },
    fixed={"type_vocab_size": 0, "absolute_positions": False, "norm": "pre", "ffn": "glu"},
    derive=_derive,
    derived=frozenset(
        {
            "layer_types",
            "global_attn_every_n_layers",
            "rope_parameters",
            "rope_scaling",
            "global_rope_theta",
            "local_rope_theta",
            "local_attention",
            "sliding_window",
            "head_dim",
        }
    ),
    prefixes=("model.",),
    model={
        "embeddings/word": ("embeddings.tok_embeddings", "table", "VD"),
        "embeddings/ln": ("embeddings.norm", "ln", "D"),
        "final_ln": ("final_norm", "ln", "D"),
    },
    layer_key="layers.{}.",
    layer={
        "attention_ln": ("attn_norm", "ln", "D"),  # layers >= 1 (layer 0: HF's Identity)
        "attention/query": ("attn.Wqkv", "wqkv_query", "QD"),
        "attention/key": ("attn.Wqkv", "wqkv_key", "QD"),
        "attention/value": ("attn.Wqkv", "wqkv_value", "QD"),
        "attention/out": ("attn.Wo", "heads_out", "DD"),
        "ffn_ln": ("mlp_norm", "ln", "D"),
        "ffn_in": ("mlp.Wi", "dense", "WD"),  # [2F, D]: input rows, then gate rows
        "ffn_out": ("mlp.Wo", "dense", "DF"),
    },
    ignored={
        f"{m}.{leaf}": HEAD
        for m in ("head.dense", "head.norm", "decoder")
        for leaf in ("weight", "bias")
    },
    kinds=KINDS,
)
