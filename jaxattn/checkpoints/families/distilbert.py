"""DistilBERT: BERT's graph without token types, under its own names."""

from __future__ import annotations

from jaxattn.checkpoints.families.bert import BUFFERS
from jaxattn.checkpoints.family import Family

DISTILBERT = Family(
    name="distilbert",
    model_types=("distilbert",),
    fields={
        "vocab_size": "vocab_size",
        "dim": "hidden_size",
        "n_layers": "num_layers",
        "n_heads": "num_heads",
        "hidden_dim": "intermediate_size",
        "max_position_embeddings": "max_positions",
        "activation": "activation",
        "pad_token_id": "pad_token_id",
        # Sinusoidal or learned, the table is stored in the weights either way.
        "sinusoidal_pos_embds": None,
    },
    # No token-type embedding; the LayerNorm eps is hard-coded in HF's DistilBERT.
    fixed={"type_vocab_size": 0, "layer_norm_eps": 1e-12},
    prefixes=("distilbert.",),
    model={
        "embeddings/word": ("embeddings.word_embeddings", "table", "VD"),
        "embeddings/position": ("embeddings.position_embeddings", "table", "PD"),
        "embeddings/ln": ("embeddings.LayerNorm", "ln", "D"),
    },
    layer_key="transformer.layer.{}.",
    layer={
        "attention/query": ("attention.q_lin", "heads_in", "DD"),
        "attention/key": ("attention.k_lin", "heads_in", "DD"),
        "attention/value": ("attention.v_lin", "heads_in", "DD"),
        "attention/out": ("attention.out_lin", "heads_out", "DD"),
        "attention_ln": ("sa_layer_norm", "ln", "D"),
        "ffn_in": ("ffn.lin1", "dense", "FD"),
        "ffn_out": ("ffn.lin2", "dense", "DF"),
        "ffn_ln": ("output_layer_norm", "ln", "D"),
    },
    mlm={
        "dense": ("vocab_transform", "dense", "DD"),
        "ln": ("vocab_layer_norm", "ln", "D"),
        "decoder_bias": ("vocab_projector.bias", "vector", "V"),
    },
    tied="vocab_projector.weight",
    ignored=BUFFERS,
    layers_field="n_layers",
)
