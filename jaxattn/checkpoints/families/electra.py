"""ELECTRA (discriminator and generator encoders): BERT with E-wide embeddings and a projection.

The smallest family and the one to read first: BERT's tables, the embedding
width, and the projection `embeddings_project` (E -> D, after the embeddings'
LayerNorm) that exists only when E != D. The generator's MLM head maps D -> E
and ties its decoder to the E-wide word embedding.
"""

from __future__ import annotations

from jaxattn.checkpoints.families.bert import BUFFERS, EMBEDDINGS, FIELDS, LAYER
from jaxattn.checkpoints.family import Family

HEADS = "the ELECTRA pre-training head (replaced-token detection); no capture uses it"

ELECTRA = Family(
    name="electra",
    model_types=("electra",),
    fields={
        **FIELDS,
        "embedding_size": "embedding_size",
        # The sequence-summary settings of ElectraForMultipleChoice.
        "summary_type": None,
        "summary_use_proj": None,
        "summary_activation": None,
        "summary_last_dropout": None,
    },
    hf_defaults={"embedding_size": 128},  # ElectraConfig's default
    fixed={"head_activation": "gelu"},  # ElectraGeneratorPredictions: get_activation("gelu")
    prefixes=("electra.",),
    model={**EMBEDDINGS, "embeddings/project": ("embeddings_project", "dense", "DE")},
    layer_key="encoder.layer.{}.",
    layer=LAYER,
    mlm={
        "dense": ("generator_predictions.dense", "dense", "ED"),
        "ln": ("generator_predictions.LayerNorm", "ln", "E"),
        "decoder_bias": ("generator_lm_head.bias", "vector", "V"),
    },
    tied="generator_lm_head.weight",
    ignored={
        **BUFFERS,
        "discriminator_predictions.dense.weight": HEADS,
        "discriminator_predictions.dense.bias": HEADS,
        "discriminator_predictions.dense_prediction.weight": HEADS,
        "discriminator_predictions.dense_prediction.bias": HEADS,
    },
)
