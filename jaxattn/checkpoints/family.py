"""`Family`: everything one checkpoint family is, as data (no code path of its own).

A family is the shared encoder (`jaxattn.engine.model`) plus the switches its
`ModelConfig` turns, and two name tables that say where HF keeps each field
and each weight. `hf_config.translate` and `hf_weights.convert_state_dict`
read these tables and nothing else, so adding a family is writing one file in
`jaxattn/checkpoints/families/` (read `electra.py`, the smallest) and naming it
in that package's `__init__`.

Weight tables map our param path to (HF module, kind, dims):
* the path is under the encoder ("embeddings/ln", "layer_{i}/attention/query"),
  or under "pooler"/"mlm_head"/"lm_head" for those groups;
* the HF module is the key without the base-model prefix and without the
  leaf ("encoder.layer.{}.attention.self.query"; the layer table's keys are
  relative to `layer_key`);
* the kind (`KINDS`, or the family's own `kinds`) says which leaves the module
  has ("weight", "bias") and how each becomes ours;
* dims gives the HF weight's shape in letters of `DIMS` (the bias takes the
  first letter; a kind whose rank is negative takes the last ones: GPT-2's
  Conv1D keeps its weight [in, out] and its bias is `out` wide), so a config
  that contradicts the weights is named before any reshape.
An entry whose param the model does not have (a bias the config switches off,
layer 0's missing pre-LN) is skipped; a param no entry fills is an error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import numpy as np

from jaxattn.config import ModelConfig


def _dense(w, c):  # torch Linear [out, in] -> kernel [in, out]
    return w.T


def _ident(w, c):
    return w


def _heads_in(w, c):  # [H*K, D] -> [D, H, K]: the head-major split of transpose_for_scores
    return w.T.reshape(c.hidden_size, c.num_heads, c.head_dim)


def _heads_out(w, c):  # [D, H*K] -> [H, K, D]
    return w.T.reshape(c.num_heads, c.head_dim, c.hidden_size)


def _head_bias(b, c):
    return b.reshape(c.num_heads, c.head_dim)


# kind -> {our leaf: (HF leaf, transform(array, config), rank of the HF tensor)};
# the leaf "" means the entry's path itself is the param (a bare table). A negative
# rank -r: the tensor has rank r and its shape is the last r letters of the dims.
KINDS: dict[str, dict[str, tuple[str, Callable, int]]] = {
    "dense": {"kernel": ("weight", _dense, 2), "bias": ("bias", _ident, 1)},
    "heads_in": {"kernel": ("weight", _heads_in, 2), "bias": ("bias", _head_bias, 1)},
    "heads_out": {"kernel": ("weight", _heads_out, 2), "bias": ("bias", _ident, 1)},
    "ln": {"scale": ("weight", _ident, 1), "bias": ("bias", _ident, 1)},
    "table": {"": ("weight", _ident, 2)},
    "vector": {"": ("", _ident, 1)},  # a bare parameter: the HF key is the module itself
}

# Letters of the dims strings -> the ModelConfig attribute giving that size.
DIMS = {
    "D": "hidden_size",
    "F": "intermediate_size",
    "V": "vocab_size",
    "P": "max_positions",
    "T": "type_vocab_size",
    "E": "embedding_width",
    "R": "relative_rows",
    "Q": "qkv_width",
    "W": "ffn_width",
    "A": "attention_width",
    "G": "kv_width",
    "K": "head_dim",
}

Table = Mapping[str, tuple[str, str, str]]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Family:
    """One checkpoint family, declaratively.

    Attributes:
      name: ModelConfig.family (the graph).
      model_types: config.json model_type values read as this family.
      fields: HF config field -> ModelConfig field (None: read, and known to
        have no effect for this family).
      required: HF field -> the only value jaxattn computes (absent passes).
      hf_defaults: HF field -> its default in the HF config class, where it
        differs from ModelConfig's (applied when config.json omits the field).
      fixed: ModelConfig fields this family always has (its switches).
      derive: (ModelConfig kwargs so far, the HF dict, the file) -> None: fills
        fields computed from several HF fields, raising CheckpointError.
      derived: the HF fields `derive` reads (so they are known, not refused).
      prefixes: base-model prefixes of task checkpoints ("bert."); a bare base
        model's keys have none.
      model: encoder-level weights (embeddings, relative tables, final norm).
      layer_key: the HF prefix of weight set i ("encoder.layer.{}.").
      layer: one weight set's table, relative to layer_key.
      pooler, mlm: optional groups, loaded all-or-none when present.
      lm: a causal model's untied next-token head (group "lm_head", keys without
        the base-model prefix), loaded when present (`ModelConfig.tied_lm_head`
        says when the word embedding is the head instead).
      tied: HF decoder weight tied to the word embedding (checked, not stored).
      ignored: HF keys (no prefix) deliberately not loaded -> the reason.
      layer_ignored: likewise for keys of every layer, relative to layer_key
        (GPT-2's causal-mask buffers "attn.bias", "attn.masked_bias").
      layers_field: the HF field counting layers, for messages.
      kinds: extra weight kinds of this family (see KINDS).
    """

    name: str
    model_types: tuple[str, ...]
    fields: Mapping[str, str | None]
    required: Mapping[str, object] = dataclasses.field(default_factory=dict)
    hf_defaults: Mapping[str, object] = dataclasses.field(default_factory=dict)
    fixed: Mapping[str, object] = dataclasses.field(default_factory=dict)
    derive: Callable[[dict, dict, str], None] | None = None
    derived: frozenset[str] = frozenset()
    prefixes: tuple[str, ...]
    model: Table
    layer_key: str
    layer: Table
    pooler: Table = dataclasses.field(default_factory=dict)
    mlm: Table = dataclasses.field(default_factory=dict)
    lm: Table = dataclasses.field(default_factory=dict)
    tied: str = ""
    ignored: Mapping[str, str] = dataclasses.field(default_factory=dict)
    layer_ignored: Mapping[str, str] = dataclasses.field(default_factory=dict)
    layers_field: str = "num_hidden_layers"
    kinds: Mapping[str, dict] = dataclasses.field(default_factory=dict)

    def kind(self, name: str) -> dict:
        return {**KINDS, **self.kinds}[name]

    def hf_field(self, ours: str) -> str:
        """The HF config field behind a ModelConfig field (for messages)."""
        names = {v: k for k, v in self.fields.items() if v}
        names.setdefault("embedding_width", names.get("embedding_size", "hidden_size"))
        # DeBERTa: 2 x HF's pos_ebd_size, from position_buckets or max_relative_positions.
        # A fused query/key/value projection (ModernBERT's Wqkv, GPT-2's c_attn): 3 x D.
        names.setdefault("qkv_width", f"3 x {names.get('hidden_size', 'hidden_size')}")
        heads = names.get("num_heads", "num_heads")
        names.setdefault("attention_width", f"{heads} x head_dim")
        names.setdefault("kv_width", "num_key_value_heads x head_dim")
        names.setdefault("relative_rows", "2 x (position_buckets or max_relative_positions)")
        return names.get(ours, ours)


def letters(dims: str, rank: int) -> str:
    """The letters of a tensor of `rank` from an entry's dims (negative: the last ones)."""
    return dims[:rank] if rank > 0 else dims[rank:]


def as_float32(value) -> np.ndarray:
    return np.asarray(value, np.float32)


def size(config: ModelConfig, letter: str) -> int:
    return int(getattr(config, DIMS[letter]))
