"""HF state dict -> jaxattn params: one name table plus small tensor transforms.

HF's parameter names live only in this file. The table is total: a weight the
model needs and the checkpoint lacks raises naming it, and so does a checkpoint
weight that nothing maps (except the few listed in IGNORED, each with a reason).

Params layout (linen): {"encoder": Encoder params, "pooler": ..., "mlm_head": ...};
the last two only when the checkpoint has them.
"""

from __future__ import annotations

import numpy as np

from jaxattn.checkpoints.hf_config import FIELDS
from jaxattn.config import ModelConfig
from jaxattn.errors import CheckpointError


def _dense(w):  # torch Linear [out, in] -> kernel [in, out]
    return w.T


def _ident(w):
    return w


# Module kinds: {our param name: (HF suffix, transform, rank)}; the heads_* transforms
# need the config, so they are built in _kinds. A module's HF weight has the shape
# of its two dims (out, in) (rank 2), its bias that of the first (rank 1).
def _kinds(c: ModelConfig) -> dict[str, dict[str, tuple]]:
    h, k, d = c.num_heads, c.head_dim, c.hidden_size
    return {
        "dense": {"kernel": ("weight", _dense, 2), "bias": ("bias", _ident, 1)},
        # [H*K, D] -> [D, H, K]: the head-major split HF's transpose_for_scores uses.
        "heads_in": {
            "kernel": ("weight", lambda w: w.T.reshape(d, h, k), 2),
            "bias": ("bias", lambda b: b.reshape(h, k), 1),
        },
        # [D, H*K] -> [H, K, D]
        "heads_out": {
            "kernel": ("weight", lambda w: w.T.reshape(h, k, d), 2),
            "bias": ("bias", _ident, 1),
        },
        "ln": {"scale": ("weight", _ident, 1), "bias": ("bias", _ident, 1)},
    }


# Dims of HF tensors (the letters in the tables below) -> the ModelConfig field giving them.
DIMS = {"D": "hidden_size", "F": "intermediate_size", "V": "vocab_size",
        "P": "max_positions", "T": "type_vocab_size"}  # fmt: skip

_BERT_LAYER = {
    "attention/query": ("attention.self.query", "heads_in", "DD"),
    "attention/key": ("attention.self.key", "heads_in", "DD"),
    "attention/value": ("attention.self.value", "heads_in", "DD"),
    "attention/out": ("attention.output.dense", "heads_out", "DD"),
    "attention_ln": ("attention.output.LayerNorm", "ln", "D"),
    "ffn_in": ("intermediate.dense", "dense", "FD"),
    "ffn_out": ("output.dense", "dense", "DF"),
    "ffn_ln": ("output.LayerNorm", "ln", "D"),
}
_DISTILBERT_LAYER = {
    "attention/query": ("attention.q_lin", "heads_in", "DD"),
    "attention/key": ("attention.k_lin", "heads_in", "DD"),
    "attention/value": ("attention.v_lin", "heads_in", "DD"),
    "attention/out": ("attention.out_lin", "heads_out", "DD"),
    "attention_ln": ("sa_layer_norm", "ln", "D"),
    "ffn_in": ("ffn.lin1", "dense", "FD"),
    "ffn_out": ("ffn.lin2", "dense", "DF"),
    "ffn_ln": ("output_layer_norm", "ln", "D"),
}

# family -> (base-model prefix in task checkpoints, layer key pattern, layer table)
_FAMILY = {
    "bert": ("bert.", "encoder.layer.{}.", _BERT_LAYER),
    "roberta": ("roberta.", "encoder.layer.{}.", _BERT_LAYER),
    "distilbert": ("distilbert.", "transformer.layer.{}.", _DISTILBERT_LAYER),
}

# Optional groups outside the encoder: loaded all-or-none when present.
# family -> {our path: (HF module, kind, dims)}; keys here carry no base-model prefix.
_MLM = {
    "bert": {"dense": ("cls.predictions.transform.dense", "dense", "DD"),
             "ln": ("cls.predictions.transform.LayerNorm", "ln", "D")},
    "roberta": {"dense": ("lm_head.dense", "dense", "DD"), "ln": ("lm_head.layer_norm", "ln", "D")},
    "distilbert": {"dense": ("vocab_transform", "dense", "DD"),
                   "ln": ("vocab_layer_norm", "ln", "D")},
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


def convert_state_dict(
    state: dict[str, np.ndarray], config: ModelConfig, *, config_file: str = "config.json"
) -> dict:
    """Map a HF state dict onto the jaxattn params tree.

    Every tensor's presence and shape is checked against what the config implies
    before any is reshaped, so a config that does not belong to the weights is
    named as such rather than failing inside a reshape.

    Args:
      state: HF parameter name -> array (any float dtype).
      config: the translated config.
      config_file: the config's file, for messages.

    Returns:
      The params tree (float32 numpy leaves).

    Raises:
      CheckpointError (a ValueError): naming a missing weight (and counting the
        others missing), a weight whose shape the config contradicts (both
        shapes), an unused weight, or a tied decoder weight that differs from the
        word embedding.
    """
    state = {_normalise_key(k): v for k, v in state.items()}
    prefix = _FAMILY[config.family][0]
    if not any(k.startswith(prefix) for k in state):
        prefix = ""  # a bare BertModel/RobertaModel/DistilBertModel checkpoint
    plan = _plan(state, config, prefix)
    _check_present(plan, state, config_file)
    _check_shapes(plan, state, config, config_file)
    tied = _TIED[config.family]
    used = {key for _, key, _, _ in plan} | ({tied} & set(state))
    _check_unused(state, used, prefix, config, config_file)
    params: dict = {}
    for path, key, fn, _ in plan:
        _set(params, path, np.asarray(fn(np.asarray(state[key], np.float32))))
    if tied in state and not np.array_equal(
        np.asarray(state[tied], np.float32), params["encoder"]["embeddings"]["word"]
    ):
        raise CheckpointError(
            f"weight {tied} is not tied to the word embedding; jaxattn needs it tied"
        )
    return params


def _plan(state: dict, config: ModelConfig, prefix: str) -> list[tuple]:
    """(our path, HF key, transform, HF dims) of every tensor the params need."""
    _, layer_key, layer_table = _FAMILY[config.family]
    kinds = _kinds(config)
    plan: list[tuple] = []

    def take(path: str, module: str, kind: str, dims: str) -> None:
        for ours, (suffix, fn, rank) in kinds[kind].items():
            plan.append((f"{path}/{ours}", f"{module}.{suffix}", fn, dims[:rank]))

    e = f"{prefix}embeddings."
    plan.append(("encoder/embeddings/word", e + "word_embeddings.weight", _ident, "VD"))
    plan.append(("encoder/embeddings/position", e + "position_embeddings.weight", _ident, "PD"))
    if config.type_vocab_size:
        key = e + "token_type_embeddings.weight"
        plan.append(("encoder/embeddings/token_type", key, _ident, "TD"))
    take("encoder/embeddings/ln", e + "LayerNorm", "ln", "D")
    for layer in range(config.num_layers):
        base = prefix + layer_key.format(layer)
        for path, (module, kind, dims) in layer_table.items():
            take(f"encoder/layer_{layer}/{path}", base + module, kind, dims)
    if f"{prefix}pooler.dense.weight" in state or f"{prefix}pooler.dense.bias" in state:
        take("pooler/dense", f"{prefix}pooler.dense", "dense", "DD")
    family = config.family
    mlm_keys = [m for m, _, _ in _MLM[family].values()] + [_MLM_BIAS[family]]
    if any(k.startswith(tuple(mlm_keys)) for k in state):
        for path, (module, kind, dims) in _MLM[family].items():
            take(f"mlm_head/{path}", module, kind, dims)
        plan.append(("mlm_head/decoder_bias", _MLM_BIAS[family], _ident, "V"))
    return plan


def _check_present(plan: list[tuple], state: dict, config_file: str) -> None:
    """Raise naming the first tensor the plan needs and the state lacks, counting the rest."""
    missing = [key for _, key, _, _ in plan if key not in state]
    if missing:
        more = f" and {len(missing) - 1} more tensor(s)" if len(missing) > 1 else ""
        raise CheckpointError(
            f"the weights lack {missing[0]!r}{more} that {config_file} implies "
            "(does it belong to these weights?)"
        )


def _check_shapes(plan: list[tuple], state: dict, config: ModelConfig, config_file: str):
    """Raise naming the first tensor whose shape the config contradicts, with both shapes."""
    hf_name = {ours: hf for hf, ours in FIELDS[config.family].items() if ours}
    for _, key, _, dims in plan:
        want = tuple(getattr(config, DIMS[d]) for d in dims)
        have = tuple(np.shape(state[key]))
        if have != want:
            fields = dict.fromkeys(DIMS[d] for d in dims)  # in order, once each
            said = ", ".join(f"{hf_name[f]}={getattr(config, f)}" for f in fields)
            raise CheckpointError(
                f"weight {key} has shape {have} but {config_file} ({said}) implies {want}"
            )


def _check_unused(state: dict, used: set, prefix: str, config: ModelConfig, config_file: str):
    """Raise naming the checkpoint's tensors that nothing maps (IGNORED aside)."""
    ignored = {k for k in state if k.removeprefix(prefix) in IGNORED or k in IGNORED}
    unused = sorted(set(state) - used - ignored)
    if not unused:
        return
    shown = ", ".join(repr(k) for k in unused[:8])
    more = f" and {len(unused) - 8} more" if len(unused) > 8 else ""
    _, layer_key, _ = _FAMILY[config.family]
    extra_layer = prefix + layer_key.format(config.num_layers)
    layers_field = {"distilbert": "n_layers"}.get(config.family, "num_hidden_layers")
    hint = (
        f" ({config_file} says {layers_field}={config.num_layers}, the weights have more layers)"
        if any(k.startswith(extra_layer) for k in unused)
        else ""
    )
    raise CheckpointError(f"the checkpoint has weight(s) jaxattn does not use: {shown}{more}{hint}")
