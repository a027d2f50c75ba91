"""HF config.json -> ModelConfig, declaratively and totally.

Every config field is either mapped to a ModelConfig field, checked against the
only value we compute correctly, or listed as having no effect on inference.
Anything else raises, naming the field: an unknown field may change the
computation, and a silently wrong attention map is the worst failure this tool
can have.
"""

from __future__ import annotations

from jaxattn.config import ModelConfig

# Fields of PretrainedConfig and of training that do not change an inference
# forward pass in float32.
NO_EFFECT = frozenset(
    {
        "_name_or_path", "architectures", "transformers_version", "model_type", "dtype",
        "torch_dtype", "id2label", "label2id", "num_labels", "problem_type",
        "finetuning_task", "initializer_range", "use_cache", "gradient_checkpointing",
        "output_attentions", "output_hidden_states", "return_dict", "torchscript",
        "tie_word_embeddings", "bos_token_id", "eos_token_id", "sep_token_id",
        "cls_token_id", "tokenizer_class", "prefix", "task_specific_params",
        "chunk_size_feed_forward", "is_encoder_decoder", "pruned_heads",
        "decoder_start_token_id", "classifier_dropout", "hidden_dropout_prob",
        "attention_probs_dropout_prob", "dropout", "attention_dropout", "qa_dropout",
        "seq_classif_dropout", "tie_weights_", "layer_norm_eps_",
        "_attn_implementation", "attn_implementation", "max_length",
    }
)  # fmt: skip

# field -> the only value jaxattn computes (fields absent from config.json pass).
REQUIRED = {
    "position_embedding_type": "absolute",
    "is_decoder": False,
    "add_cross_attention": False,
    "pruned_heads": {},
}

# HF "hidden_act" -> ModelConfig.activation. gelu_new, gelu_pytorch_tanh and
# gelu_fast are all 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "relu": "relu",
}

# family -> {HF field: ModelConfig field}
FIELDS = {
    "bert": {
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
    },
    "distilbert": {
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
}
FIELDS["roberta"] = FIELDS["bert"]
# ModelConfig fields with no HF default: config.json must give them.
SIZES = frozenset(
    {"vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size", "max_positions"}
)
MODEL_TYPES = {"bert": "bert", "roberta": "roberta", "distilbert": "distilbert"}


def translate(hf: dict, *, name: str, ignore_fields: tuple[str, ...] = ()) -> ModelConfig:
    """Translate a HF config.json dict into a ModelConfig.

    Args:
      hf: the parsed config.json.
      name: the model's display name.
      ignore_fields: extra fields the caller vouches have no effect.

    Raises:
      ValueError: unknown model_type; a field that is neither handled nor known
        to have no effect; a handled field with a value jaxattn cannot compute.
    """
    model_type = hf.get("model_type")
    if model_type not in MODEL_TYPES:
        raise ValueError(
            f"unsupported model_type {model_type!r} in config.json: "
            f"jaxattn converts {', '.join(MODEL_TYPES)}"
        )
    family = MODEL_TYPES[model_type]
    table = FIELDS[family]
    out: dict = {"family": family, "name": name}
    for key, value in hf.items():
        if key in table:
            if table[key] is not None:
                out[table[key]] = value
        elif key in REQUIRED:
            if value != REQUIRED[key]:
                raise ValueError(
                    f"config field {key}={value!r} is not supported: jaxattn computes only "
                    f"{key}={REQUIRED[key]!r}"
                )
        elif key not in NO_EFFECT and key not in ignore_fields:
            raise ValueError(
                f"config field {key!r} of model_type {model_type!r} is not known to jaxattn "
                "and may change the computation; if it does not, pass "
                f"ignore_config_fields=({key!r},) to jaxattn.load"
            )
    act = out.get("activation", "gelu")
    if act not in ACTIVATIONS:
        raise ValueError(
            f"unsupported activation {act!r}: jaxattn computes {', '.join(ACTIVATIONS)}"
        )
    out["activation"] = ACTIVATIONS[act]
    if family == "roberta":
        # RoBERTa positions start at padding_idx + 1 (HF create_position_ids_from_input_ids).
        out["position_offset"] = out.get("pad_token_id", 1) + 1
        out.setdefault("pad_token_id", 1)
    if family == "distilbert":
        out["type_vocab_size"] = 0  # DistilBERT has no token-type embedding.
        out["layer_norm_eps"] = 1e-12  # hard-coded in HF's DistilBERT
    missing = [hf_key for hf_key, ours in table.items() if ours in SIZES and ours not in out]
    if missing:
        raise ValueError(f"config.json lacks required field(s): {', '.join(missing)}")
    return ModelConfig(**out)
