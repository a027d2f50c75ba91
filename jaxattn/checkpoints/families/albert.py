"""ALBERT: E-wide embeddings with a projection, and layers that share weight sets.

HF runs num_hidden_layers layers with num_hidden_groups weight sets (layer l
uses set int(l / (L / groups)); usually one set for all); capture still reports
L layers, and `ModelInfo.shared_weights` says which share. jaxattn computes one
layer per set application (inner_group_num = 1, what every released ALBERT has).
"""

from __future__ import annotations

from jaxattn.checkpoints.families.bert import BUFFERS, EMBEDDINGS, FIELDS
from jaxattn.checkpoints.family import Family
from jaxattn.errors import CheckpointError

SOP = "the sentence-order head; no capture uses it"


def _groups(out: dict, hf: dict, source: str) -> None:
    groups, layers = out.get("layer_groups", 1), out.get("num_layers", 0)
    if not 1 <= groups <= max(layers, 1):
        raise CheckpointError(
            f"{source}: num_hidden_groups={groups} must lie in 1..{layers} "
            f"(num_hidden_layers={layers})"
        )


ALBERT = Family(
    name="albert",
    model_types=("albert",),
    fields={
        **FIELDS,
        "embedding_size": "embedding_size",
        "num_hidden_groups": "layer_groups",
        "classifier_dropout_prob": None,
    },
    required={"inner_group_num": 1},
    # AlbertConfig's defaults where they differ from BERT's.
    hf_defaults={"embedding_size": 128, "hidden_act": "gelu_new", "num_hidden_groups": 1},
    derive=_groups,
    prefixes=("albert.",),
    model={
        **EMBEDDINGS,
        "embeddings/project": ("encoder.embedding_hidden_mapping_in", "dense", "DE"),
    },
    layer_key="encoder.albert_layer_groups.{}.albert_layers.0.",
    layer={
        "attention/query": ("attention.query", "heads_in", "DD"),
        "attention/key": ("attention.key", "heads_in", "DD"),
        "attention/value": ("attention.value", "heads_in", "DD"),
        "attention/out": ("attention.dense", "heads_out", "DD"),
        "attention_ln": ("attention.LayerNorm", "ln", "D"),
        "ffn_in": ("ffn", "dense", "FD"),
        "ffn_out": ("ffn_output", "dense", "DF"),
        "ffn_ln": ("full_layer_layer_norm", "ln", "D"),
    },
    pooler={"dense": ("pooler", "dense", "DD")},
    mlm={
        "dense": ("predictions.dense", "dense", "ED"),
        "ln": ("predictions.LayerNorm", "ln", "E"),
        "decoder_bias": ("predictions.bias", "vector", "V"),
    },
    tied="predictions.decoder.weight",
    ignored={
        **BUFFERS,
        "predictions.decoder.bias": "the same tensor as predictions.bias",
        "sop_classifier.classifier.weight": SOP,
        "sop_classifier.classifier.bias": SOP,
    },
    layers_field="num_hidden_groups",
)
