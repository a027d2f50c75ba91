"""HF config.json -> ModelConfig, declaratively and totally.

Every config field is either mapped to a ModelConfig field, checked against the
only value we compute correctly, or listed as having no effect on inference.
Anything else raises CheckpointError, naming the file and the field: an
unknown field may change the computation, and a silently wrong attention map is
the worst failure this tool can have. So does a field of the wrong JSON type.
"""

from __future__ import annotations

import json

from jaxattn.checkpoints.families import MODEL_TYPES, REFUSED, supported
from jaxattn.checkpoints.family import Family
from jaxattn.config import ModelConfig
from jaxattn.errors import CheckpointError

# Fields of PretrainedConfig and of training that do not change an inference
# forward pass in float32.
NO_EFFECT = frozenset(
    {
        "_name_or_path",
        "architectures",
        "transformers_version",
        "model_type",
        "dtype",
        "torch_dtype",
        "id2label",
        "label2id",
        "num_labels",
        "problem_type",
        "finetuning_task",
        "initializer_range",
        "use_cache",
        "gradient_checkpointing",
        "output_attentions",
        "output_hidden_states",
        "return_dict",
        "torchscript",
        "tie_word_embeddings",
        "bos_token_id",
        "eos_token_id",
        "sep_token_id",
        "cls_token_id",
        "tokenizer_class",
        "prefix",
        "task_specific_params",
        "chunk_size_feed_forward",
        "is_encoder_decoder",
        "pruned_heads",
        "decoder_start_token_id",
        "classifier_dropout",
        "hidden_dropout_prob",
        "attention_probs_dropout_prob",
        "dropout",
        "attention_dropout",
        "qa_dropout",
        "seq_classif_dropout",
        "tie_weights_",
        "layer_norm_eps_",
        "_attn_implementation",
        "attn_implementation",
        "max_length",
    }
)

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
    "silu": "silu",
    "swish": "silu",
}

# ModelConfig fields with no HF default: config.json must give them.
SIZES = frozenset(
    {"vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size", "max_positions"}
)
# ModelConfig field -> the JSON type config.json must give it ("int": a whole number).
TYPES = {
    "vocab_size": "int",
    "hidden_size": "int",
    "num_layers": "int",
    "num_heads": "int",
    "intermediate_size": "int",
    "max_positions": "int",
    "type_vocab_size": "int",
    "pad_token_id": "int",
    "layer_norm_eps": "float",
    "activation": "str",
    "embedding_size": "int",
    "layer_groups": "int",
    "attention_bias": "bool",
    "mlp_bias": "bool",
    "norm_bias": "bool",
    "tied_lm_head": "bool",
    "parallel_residual": "bool",
}
_TYPE_WORDS = {
    "int": "a whole number",
    "float": "a number",
    "str": "a string",
    "bool": "true or false",
    "list": "a list",
}


def json_kind(value) -> str:
    """What a parsed JSON value is, in JSON's words ("a string", "null", ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def translate(
    hf: dict, *, name: str, ignore_fields: tuple[str, ...] = (), source: str = "config.json"
) -> ModelConfig:
    """Translate a HF config.json dict into a ModelConfig.

    Args:
      hf: the parsed config.json.
      name: the model's display name.
      ignore_fields: extra fields the caller vouches have no effect (one name alone
        is that field).
      source: the config file, for messages.

    Raises:
      CheckpointError (a ValueError), naming the file and the field: no or an
        unknown model_type; a field that is neither handled nor known to have no
        effect; a handled field of the wrong type or with a value jaxattn cannot
        compute; a missing size; sizes that contradict each other.
    """
    if isinstance(ignore_fields, str):  # not its substrings: "rope_scaling" held "scaling"
        ignore_fields = (ignore_fields,)
    family = family_of(hf, source)
    hf = {**family.hf_defaults, **hf}
    table = family.fields
    required = {**REQUIRED, **family.required}
    out: dict = {"family": family.name, "name": name}
    for key, value in hf.items():
        if key in table:
            if table[key] is not None:
                out[table[key]] = typed(key, value, TYPES[table[key]], source)
        elif key in required:
            if value != required[key]:
                raise CheckpointError(
                    f"{source}: {key}={json.dumps(value)} is not supported: jaxattn computes "
                    f"only {key}={json.dumps(required[key])}"
                )
        elif key not in NO_EFFECT and key not in family.derived and key not in ignore_fields:
            raise CheckpointError(
                f"{source}: field {key!r} of model_type {hf['model_type']!r} is not known to "
                "jaxattn and may change the computation; if it does not, name it as ignored "
                f"(ignore_config_fields=({key!r},) in Python, --ignore-config-field {key} "
                "for jaxattn convert)"
            )
    act = out.get("activation", "gelu")
    if act not in ACTIVATIONS:
        raise CheckpointError(
            f"{source}: unsupported activation {act!r}: jaxattn computes {', '.join(ACTIVATIONS)}"
        )
    out["activation"] = ACTIVATIONS[act]
    out.update(family.fixed)
    if family.derive is not None:
        family.derive(out, hf, source)
    _check_sizes(out, family, source)
    try:
        return ModelConfig(**out)
    except ValueError as e:  # a combination the tables let through: still named by file
        raise CheckpointError(f"{source}: {e}") from e


def family_of(hf: dict, source: str) -> Family:
    """The jaxattn family of config.json's model_type.

    Raises:
      CheckpointError: no model_type, or one jaxattn does not read (naming the
        families it reads, from the one list, `checkpoints.families.FAMILIES`).
    """
    if "model_type" not in hf:
        raise CheckpointError(
            f"{source} has no model_type: jaxattn reads the families {supported()}"
        )
    model_type = hf["model_type"]
    if not isinstance(model_type, str):
        raise CheckpointError(
            f"{source}: model_type is {json.dumps(model_type)[:60]} ({json_kind(model_type)}), "
            f"but it must be a string: jaxattn reads the families {supported()}"
        )
    if model_type in REFUSED:
        raise CheckpointError(f"{source}: model_type {model_type!r} {REFUSED[model_type]}")
    if model_type not in MODEL_TYPES:
        raise CheckpointError(
            f"{source}: unsupported model_type {model_type!r}: jaxattn reads the "
            f"families {supported()}"
        )
    return MODEL_TYPES[model_type]


def typed(key: str, value, kind: str, source: str):
    """`value` as the JSON type `kind` ("384.0" for a whole number is taken as 384)."""
    if isinstance(value, float) and kind == "int" and value.is_integer():
        return int(value)
    ok = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, int | float) and not isinstance(value, bool),
        "str": isinstance(value, str),
        "bool": isinstance(value, bool),
        "list": isinstance(value, list),
    }[kind]
    if not ok:
        raise CheckpointError(
            f"{source}: {key} is {json.dumps(value)} ({json_kind(value)}), "
            f"but it must be {_TYPE_WORDS[kind]}"
        )
    return value


def _check_sizes(out: dict, family: Family, source: str) -> None:
    """Every size present and positive, and the hidden size split evenly into heads."""
    hf_name = {f: family.hf_field(f) for f in SIZES}
    missing = [hf_name[f] for f in sorted(SIZES) if f not in out]
    if missing:
        raise CheckpointError(f"{source} lacks required field(s): {', '.join(missing)}")
    for field in sorted(SIZES):
        if out[field] <= 0:
            raise CheckpointError(f"{source}: {hf_name[field]}={out[field]} must be positive")
    if out["hidden_size"] % out["num_heads"]:
        raise CheckpointError(
            f"{source}: {hf_name['hidden_size']}={out['hidden_size']} is not divisible by "
            f"{hf_name['num_heads']}={out['num_heads']}: each head gets an equal share"
        )
