"""BERT (and MiniLM), and RoBERTa with XLM-RoBERTa and CamemBERT: post-LN, absolute positions.

The reference families: the others are written as differences from these tables.
"""

from __future__ import annotations

from jaxattn.checkpoints.family import Family

# HF field -> ModelConfig field, as BertConfig names them.
FIELDS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_positions",
    "type_vocab_size": "type_vocab_size",
    "hidden_act": "activation",
    "layer_norm_eps": "layer_norm_eps",
    "pad_token_id": "pad_token_id",
}

EMBEDDINGS = {
    "embeddings/word": ("embeddings.word_embeddings", "table", "VE"),
    "embeddings/position": ("embeddings.position_embeddings", "table", "PE"),
    "embeddings/token_type": ("embeddings.token_type_embeddings", "table", "TE"),
    "embeddings/ln": ("embeddings.LayerNorm", "ln", "E"),
}

LAYER = {
    "attention/query": ("attention.self.query", "heads_in", "DD"),
    "attention/key": ("attention.self.key", "heads_in", "DD"),
    "attention/value": ("attention.self.value", "heads_in", "DD"),
    "attention/out": ("attention.output.dense", "heads_out", "DD"),
    "attention_ln": ("attention.output.LayerNorm", "ln", "D"),
    "ffn_in": ("intermediate.dense", "dense", "FD"),
    "ffn_out": ("output.dense", "dense", "DF"),
    "ffn_ln": ("output.LayerNorm", "ln", "D"),
}

BUFFERS = {
    "embeddings.position_ids": "a buffer equal to arange(max_positions)",
    "embeddings.token_type_ids": "a buffer of zeros",
}

BERT = Family(
    name="bert",
    model_types=("bert",),
    fields=FIELDS,
    prefixes=("bert.",),
    model=EMBEDDINGS,
    layer_key="encoder.layer.{}.",
    layer=LAYER,
    pooler={"dense": ("pooler.dense", "dense", "DD")},
    mlm={
        "dense": ("cls.predictions.transform.dense", "dense", "DD"),
        "ln": ("cls.predictions.transform.LayerNorm", "ln", "D"),
        "decoder_bias": ("cls.predictions.bias", "vector", "V"),
    },
    tied="cls.predictions.decoder.weight",
    ignored={
        **BUFFERS,
        "cls.seq_relationship.weight": "the next-sentence head; no capture uses it",
        "cls.seq_relationship.bias": "the next-sentence head; no capture uses it",
        "cls.predictions.decoder.bias": "the same tensor as cls.predictions.bias",
    },
)


def _roberta_positions(out: dict, hf: dict, source: str) -> None:
    # Positions start at padding_idx + 1 (HF create_position_ids_from_input_ids).
    out.setdefault("pad_token_id", 1)
    out["position_offset"] = out["pad_token_id"] + 1


ROBERTA = Family(
    name="roberta",
    # XLM-RoBERTa and CamemBERT are RoBERTa's graph with a SentencePiece vocabulary.
    model_types=("roberta", "xlm-roberta", "camembert"),
    fields=FIELDS,
    derive=_roberta_positions,
    prefixes=("roberta.",),
    model=EMBEDDINGS,
    layer_key="encoder.layer.{}.",
    layer=LAYER,
    pooler={"dense": ("pooler.dense", "dense", "DD")},
    mlm={
        "dense": ("lm_head.dense", "dense", "DD"),
        "ln": ("lm_head.layer_norm", "ln", "D"),
        "decoder_bias": ("lm_head.bias", "vector", "V"),
    },
    tied="lm_head.decoder.weight",
    ignored={**BUFFERS, "lm_head.decoder.bias": "the same tensor as lm_head.bias"},
    fixed={"head_activation": "gelu"},  # RobertaLMHead applies the exact gelu, whatever hidden_act
)
