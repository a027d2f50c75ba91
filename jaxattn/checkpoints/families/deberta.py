"""DeBERTa-v2 and -v3 (model_type "deberta-v2"): BERT's post-LN layers, disentangled attention.

The differences from BERT (He et al. 2021; HF modeling_deberta_v2.py):
* no absolute positions unless position_biased_input (v3: none), no token
  types unless type_vocab_size > 0 (v3: none); with embedding_size != D the
  projection `embed_proj` (no bias) comes BEFORE the embeddings' LayerNorm;
* every layer adds position terms to its scores (`jaxattn.engine.relative`):
  c2p and p2c from one relative embedding table (2 x pos_ebd_size rows,
  LayerNorm-ed when norm_rel_ebd says "layer_norm"), projected by the
  layer's own query/key (share_att_key) or by pos_query_proj/pos_key_proj;
  the scale is sqrt(K (1 + number of position terms)).
HF also multiplies the embeddings by the attention mask: that zeroes padded
rows only, which no real token attends to, so it changes nothing captured.

Refused: relative_attention false, pos_att_type entries other than c2p/p2c,
norm_rel_ebd other than layer_norm/none, conv_kernel_size > 0 (DeBERTa-v2
xlarge's convolution after layer 0), attention_head_size != hidden/heads,
position_buckets HF divides by zero with. DeBERTa v1 ("deberta") is another
graph and is not read.
"""

from __future__ import annotations

import json

from jaxattn.checkpoints.families.bert import BUFFERS, FIELDS
from jaxattn.checkpoints.family import Family
from jaxattn.errors import CheckpointError
from jaxattn.positions import POSITION_TERMS, Relative, attention_span

REL_NORMS = ("layer_norm", "none")
V3_HEAD = (
    "the legacy=false MLM head (lm_predictions); jaxattn maps the head HF's "
    "DebertaV2ForMaskedLM builds by default (legacy=true: cls.predictions)"
)
RTD_HEAD = "the replaced-token-detection head of the original checkpoints (HF ignores it)"


def _typed(source: str, key: str, value, kind: type, words: str):
    if kind is int and isinstance(value, float) and value.is_integer():
        return int(value)  # "8.0" for a whole number, as hf_config.typed
    ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
    if not ok:
        raise CheckpointError(f"{source}: {key} is {json.dumps(value)}, but it must be {words}")
    return value


def _unsupported(source: str, key: str, value, supported: str):
    return CheckpointError(
        f"{source}: {key}={json.dumps(value)} is not supported: jaxattn computes {supported}"
    )


def _att_types(source: str, value) -> tuple[str, ...]:
    """HF pos_att_type: a list, or a "p2c|c2p" string (split, lower-cased, stripped)."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = [x.strip() for x in value.lower().split("|")]
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise CheckpointError(
            f"{source}: pos_att_type is {json.dumps(value)}, but it must be a list of "
            'strings or a "p2c|c2p" string'
        )
    bad = [x for x in value if x not in POSITION_TERMS]
    if bad:
        raise _unsupported(
            source, "pos_att_type", value, 'only the position terms "c2p" and "p2c" (any subset)'
        )
    return tuple(t for t in POSITION_TERMS if t in value)  # HF adds c2p, then p2c


def _derive(out: dict, hf: dict, source: str) -> None:
    """Relative attention and absolute positions from DeBERTa's own fields."""

    def flag(key: str) -> bool:
        return _typed(source, key, hf[key], bool, "true or false")

    def whole(key: str) -> int:
        return _typed(source, key, hf[key], int, "a whole number")

    if not flag("relative_attention"):
        raise _unsupported(
            source, "relative_attention", False, "only relative_attention=true (DeBERTa-v2/v3)"
        )
    if whole("conv_kernel_size") > 0:
        raise _unsupported(
            source,
            "conv_kernel_size",
            hf["conv_kernel_size"],
            "only conv_kernel_size=0 (no convolution after layer 0)",
        )
    norms = _typed(source, "norm_rel_ebd", hf["norm_rel_ebd"], str, "a string")
    entries = [x.strip() for x in norms.lower().split("|")]  # HF's parsing
    if any(x not in REL_NORMS for x in entries):
        raise _unsupported(source, "norm_rel_ebd", norms, '"layer_norm" or "none"')
    buckets, max_rel = whole("position_buckets"), whole("max_relative_positions")
    resolved = attention_span(max_rel, buckets, out.get("max_positions", 0))[0]
    if buckets > 0 and (buckets < 2 or resolved - 1 == buckets // 2):
        raise _unsupported(
            source,
            "position_buckets",
            buckets,
            "position_buckets >= 2 with position_buckets // 2 != "
            f"max_relative_positions - 1 (max_relative_positions resolves to "
            f"{resolved}): HF divides by zero otherwise",
        )
    if hf.get("attention_head_size") is not None and out.get("num_heads"):
        even = out.get("hidden_size", 0) // out["num_heads"]
        if whole("attention_head_size") != even:
            raise _unsupported(
                source,
                "attention_head_size",
                hf["attention_head_size"],
                f"only hidden_size / num_attention_heads = {even}",
            )
    out["absolute_positions"] = flag("position_biased_input")
    out["relative"] = Relative(
        att_types=_att_types(source, hf["pos_att_type"]),
        buckets=buckets,
        max_relative=max_rel,
        share_att_key=flag("share_att_key"),
        norm_rel_ebd="layer_norm" in entries,
    )


DEBERTA_V2 = Family(
    name="deberta-v2",
    model_types=("deberta-v2",),
    fields={
        **FIELDS,
        "embedding_size": "embedding_size",
        "legacy": None,  # which MLM head class HF builds; see `ignored`
        "pooler_dropout": None,  # ContextPooler: classification heads only
        "pooler_hidden_act": None,
        "pooler_hidden_size": None,
        "cls_dropout": None,
        "conv_act": None,  # the convolution's settings; conv_kernel_size > 0 is refused
        "conv_groups": None,
    },
    # DebertaV2Config's defaults (and its getattr defaults) where ModelConfig's differ.
    hf_defaults={
        "type_vocab_size": 0,
        "layer_norm_eps": 1e-7,
        "relative_attention": False,
        "max_relative_positions": -1,
        "position_buckets": -1,
        "position_biased_input": True,
        "pos_att_type": None,
        "share_att_key": False,
        "norm_rel_ebd": "none",
        "conv_kernel_size": 0,
    },
    fixed={"project_first": True, "projection_bias": False},
    derive=_derive,
    derived=frozenset(
        {
            "relative_attention",
            "max_relative_positions",
            "position_buckets",
            "position_biased_input",
            "pos_att_type",
            "share_att_key",
            "norm_rel_ebd",
            "conv_kernel_size",
            "attention_head_size",
        }
    ),
    prefixes=("deberta.",),
    model={
        "embeddings/word": ("embeddings.word_embeddings", "table", "VE"),
        "embeddings/position": ("embeddings.position_embeddings", "table", "PE"),
        "embeddings/token_type": ("embeddings.token_type_embeddings", "table", "TE"),
        "embeddings/project": ("embeddings.embed_proj", "dense", "DE"),  # no bias
        "embeddings/ln": ("embeddings.LayerNorm", "ln", "D"),  # after the projection
        "rel_embeddings": ("encoder.rel_embeddings", "table", "RD"),
        "rel_ln": ("encoder.LayerNorm", "ln", "D"),
    },
    layer_key="encoder.layer.{}.",
    layer={
        "attention/query": ("attention.self.query_proj", "heads_in", "DD"),
        "attention/key": ("attention.self.key_proj", "heads_in", "DD"),
        "attention/value": ("attention.self.value_proj", "heads_in", "DD"),
        "attention/pos_query": ("attention.self.pos_query_proj", "heads_in", "DD"),
        "attention/pos_key": ("attention.self.pos_key_proj", "heads_in", "DD"),
        "attention/out": ("attention.output.dense", "heads_out", "DD"),
        "attention_ln": ("attention.output.LayerNorm", "ln", "D"),
        "ffn_in": ("intermediate.dense", "dense", "FD"),
        "ffn_out": ("output.dense", "dense", "DF"),
        "ffn_ln": ("output.LayerNorm", "ln", "D"),
    },
    mlm={
        "dense": ("cls.predictions.transform.dense", "dense", "ED"),
        "ln": ("cls.predictions.transform.LayerNorm", "ln", "E"),
        "decoder_bias": ("cls.predictions.bias", "vector", "V"),
    },
    tied="cls.predictions.decoder.weight",
    ignored={
        **BUFFERS,
        "embeddings.position_embeddings.weight": (
            "unused without position_biased_input (HF ignores it too: "
            "_keys_to_ignore_on_load_unexpected)"
        ),
        "cls.predictions.decoder.bias": "the same tensor as cls.predictions.bias",
        **{
            f"lm_predictions.lm_head.{k}": V3_HEAD
            for k in ("dense.weight", "dense.bias", "LayerNorm.weight", "LayerNorm.bias", "bias")
        },
        **{
            f"mask_predictions.{k}": RTD_HEAD
            for k in (
                "dense.weight",
                "dense.bias",
                "LayerNorm.weight",
                "LayerNorm.bias",
                "classifier.weight",
                "classifier.bias",
            )
        },
    },
)
