"""HF state dict -> jaxattn params: one name table plus small tensor transforms.

HF's parameter names live only in this file. The table is total: a weight the
model needs and the checkpoint lacks raises naming it, and so does a checkpoint
weight that nothing maps (except the few listed in IGNORED, each with a reason).

Params layout (linen): {"encoder": Encoder params, "pooler": ..., "mlm_head": ...};
the last two only when the checkpoint has them.
"""

from __future__ import annotations

import numpy as np

from jaxattn.config import ModelConfig


def _dense(w):  # torch Linear [out, in] -> kernel [in, out]
    return w.T


def _ident(w):
    return w


# Module kinds: {our param name: (HF suffix, transform)}; the heads_* transforms
# need the config, so they are built in _kinds.
def _kinds(c: ModelConfig) -> dict[str, dict[str, tuple]]:
    h, k, d = c.num_heads, c.head_dim, c.hidden_size
    return {
        "dense": {"kernel": ("weight", _dense), "bias": ("bias", _ident)},
        # [H*K, D] -> [D, H, K]: the head-major split HF's transpose_for_scores uses.
        "heads_in": {
            "kernel": ("weight", lambda w: w.T.reshape(d, h, k)),
            "bias": ("bias", lambda b: b.reshape(h, k)),
        },
        # [D, H*K] -> [H, K, D]
        "heads_out": {
            "kernel": ("weight", lambda w: w.T.reshape(h, k, d)),
            "bias": ("bias", _ident),
        },
        "ln": {"scale": ("weight", _ident), "bias": ("bias", _ident)},
    }


_BERT_LAYER = {
    "attention/query": ("attention.self.query", "heads_in"),
    "attention/key": ("attention.self.key", "heads_in"),
    "attention/value": ("attention.self.value", "heads_in"),
    "attention/out": ("attention.output.dense", "heads_out"),
    "attention_ln": ("attention.output.LayerNorm", "ln"),
    "ffn_in": ("intermediate.dense", "dense"),
    "ffn_out": ("output.dense", "dense"),
    "ffn_ln": ("output.LayerNorm", "ln"),
}
_DISTILBERT_LAYER = {
    "attention/query": ("attention.q_lin", "heads_in"),
    "attention/key": ("attention.k_lin", "heads_in"),
    "attention/value": ("attention.v_lin", "heads_in"),
    "attention/out": ("attention.out_lin", "heads_out"),
    "attention_ln": ("sa_layer_norm", "ln"),
    "ffn_in": ("ffn.lin1", "dense"),
    "ffn_out": ("ffn.lin2", "dense"),
    "ffn_ln": ("output_layer_norm", "ln"),
}

# family -> (base-model prefix in task checkpoints, layer key pattern, layer table)
_FAMILY = {
    "bert": ("bert.", "encoder.layer.{}.", _BERT_LAYER),
    "roberta": ("roberta.", "encoder.layer.{}.", _BERT_LAYER),
    "distilbert": ("distilbert.", "transformer.layer.{}.", _DISTILBERT_LAYER),
}

# Optional groups outside the encoder: loaded all-or-none when present.
# family -> {our path: (HF module, kind)}; keys here carry no base-model prefix.
_MLM = {
    "bert": {"dense": ("cls.predictions.transform.dense", "dense"),
             "ln": ("cls.predictions.transform.LayerNorm", "ln")},
    "roberta": {"dense": ("lm_head.dense", "dense"), "ln": ("lm_head.layer_norm", "ln")},
    "distilbert": {"dense": ("vocab_transform", "dense"), "ln": ("vocab_layer_norm", "ln")},
}  # fmt: skip
_MLM_BIAS = {"bert": "cls.predictions.bias", "roberta": "lm_head.bias",
             "distilbert": "vocab_projector.bias"}  # fmt: skip
# Decoder weights tied to the word embedding (checked equal, not stored).
_TIED = {"bert": "cls.predictions.decoder.weight", "roberta": "lm_head.decoder.weight",
         "distilbert": "vocab_projector.weight"}  # fmt: skip

# Checkpoint entries deliberately not loaded, with the reason.
IGNORED = {
    "embeddings.position_ids": "a buffer equal to arange(max_positions)",
    "embeddings.token_type_ids": "a buffer of zeros",
    "cls.seq_relationship.weight": "the next-sentence head; no capture uses it",
    "cls.seq_relationship.bias": "the next-sentence head; no capture uses it",
    "cls.predictions.decoder.bias": "the same tensor as cls.predictions.bias",
    "lm_head.decoder.bias": "the same tensor as lm_head.bias",
}


def _normalise_key(key: str) -> str:
    # Old TF-converted BERT checkpoints name LayerNorm params gamma/beta.
    return key.replace("LayerNorm.gamma", "LayerNorm.weight").replace(
        "LayerNorm.beta", "LayerNorm.bias"
    )


def _set(tree: dict, path: str, value) -> None:
    *parents, leaf = path.split("/")
    for p in parents:
        tree = tree.setdefault(p, {})
    tree[leaf] = value


def convert_state_dict(state: dict[str, np.ndarray], config: ModelConfig) -> dict:
    """Map a HF state dict onto the jaxattn params tree.

    Args:
      state: HF parameter name -> array (any float dtype).
      config: the translated config.

    Returns:
      The params tree (float32 numpy leaves).

    Raises:
      ValueError: naming a missing weight, an unused weight, or a tied decoder
        weight that differs from the word embedding.
    """
    state = {_normalise_key(k): v for k, v in state.items()}
    prefix, layer_key, layer_table = _FAMILY[config.family]
    if not any(k.startswith(prefix) for k in state):
        prefix = ""  # a bare BertModel/RobertaModel/DistilBertModel checkpoint
    kinds = _kinds(config)
    params: dict = {}
    used: set[str] = set()

    def take(path: str, module: str, kind: str) -> None:
        for ours, (suffix, fn) in kinds[kind].items():
            key = f"{module}.{suffix}"
            if key not in state:
                raise ValueError(f"checkpoint is missing weight {key!r} (for {path}/{ours})")
            used.add(key)
            _set(params, f"{path}/{ours}", np.asarray(fn(np.asarray(state[key], np.float32))))

    def take_table(path: str, key: str) -> None:
        if key not in state:
            raise ValueError(f"checkpoint is missing weight {key!r} (for {path})")
        used.add(key)
        _set(params, path, np.asarray(state[key], np.float32))

    e = f"{prefix}embeddings."
    take_table("encoder/embeddings/word", e + "word_embeddings.weight")
    take_table("encoder/embeddings/position", e + "position_embeddings.weight")
    if config.type_vocab_size:
        take_table("encoder/embeddings/token_type", e + "token_type_embeddings.weight")
    take("encoder/embeddings/ln", e + "LayerNorm", "ln")
    for layer in range(config.num_layers):
        base = prefix + layer_key.format(layer)
        for path, (module, kind) in layer_table.items():
            take(f"encoder/layer_{layer}/{path}", base + module, kind)

    if f"{prefix}pooler.dense.weight" in state or f"{prefix}pooler.dense.bias" in state:
        take("pooler/dense", f"{prefix}pooler.dense", "dense")
    family = config.family
    mlm_keys = [m for m, _ in _MLM[family].values()] + [_MLM_BIAS[family]]
    if any(k.startswith(tuple(mlm_keys)) for k in state):
        for path, (module, kind) in _MLM[family].items():
            take(f"mlm_head/{path}", module, kind)
        take_table("mlm_head/decoder_bias", _MLM_BIAS[family])
    tied = _TIED[family]
    if tied in state:
        used.add(tied)
        if not np.array_equal(
            np.asarray(state[tied], np.float32), params["encoder"]["embeddings"]["word"]
        ):
            raise ValueError(f"{tied!r} is not tied to the word embedding; jaxattn needs it tied")

    ignored = {k for k in state if k.removeprefix(prefix) in IGNORED or k in IGNORED}
    unused = sorted(set(state) - used - ignored)
    if unused:
        shown = ", ".join(repr(k) for k in unused[:8])
        more = f" and {len(unused) - 8} more" if len(unused) > 8 else ""
        raise ValueError(f"checkpoint has weight(s) jaxattn does not use: {shown}{more}")
    return params
