"""Random-weight base-size checkpoints of every family, for the speed benchmarks.

Each is the published base model's shape (layers, heads, widths and the
family's switches; the decoders GPT-2 small's and Llama-3.2-1B's) with BERT's
uncased WordPiece tokenizer (the embedded MiniLM's) and its 30,522-word
vocabulary, so the same synthetic texts are exactly T tokens for every family.
The vocabulary size changes the embedding table only, which costs one gather:
the timings are the base models'.

Where the embedded model is not installed, ``JAXATTN_BENCH_TOKENIZER=DIR`` names
a directory holding its tokenizer files (``bash benchmarks/gpu_run.sh prepare``
copies them into ``.gpu/tokenizer``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from jaxattn.errors import UsageError

TOKENIZER_ENV = "JAXATTN_BENCH_TOKENIZER"

BASE = dict(
    vocab_size=30522,
    hidden_size=768,
    num_hidden_layers=12,
    num_attention_heads=12,
    intermediate_size=3072,
    max_position_embeddings=512,
)
# name -> (transformers config class, its fields beyond BASE); the published base models' shapes.
SHAPES: dict[str, tuple[str, dict]] = {
    "bert-base": ("BertConfig", {}),
    "electra-base": ("ElectraConfig", {"embedding_size": 768}),
    "albert-base": (
        "AlbertConfig",
        {"embedding_size": 128, "num_hidden_groups": 1, "hidden_act": "gelu_new"},
    ),
    "xlm-roberta-base": (
        "XLMRobertaConfig",
        {
            "max_position_embeddings": 514,
            "type_vocab_size": 1,
            "pad_token_id": 1,
            "layer_norm_eps": 1e-5,
        },
    ),
    "deberta-v3-base": (
        "DebertaV2Config",
        {
            "relative_attention": True,
            "position_buckets": 256,
            "max_relative_positions": -1,
            "pos_att_type": ["p2c", "c2p"],
            "norm_rel_ebd": "layer_norm",
            "share_att_key": True,
            "position_biased_input": False,
            "type_vocab_size": 0,
            "layer_norm_eps": 1e-7,
        },
    ),
    "modernbert-base": (
        "ModernBertConfig",
        {
            "num_hidden_layers": 22,
            "intermediate_size": 1152,
            "max_position_embeddings": 8192,
            "global_attn_every_n_layers": 3,
            "local_attention": 128,
            "global_rope_theta": 160000.0,
            "local_rope_theta": 10000.0,
            "pad_token_id": 0,
            "cls_token_id": 101,
            "sep_token_id": 102,
            "bos_token_id": 101,
            "eos_token_id": 102,
        },
    ),
}
# The decoders: their configs whole (GPT-2's config spells its fields its own way), not
# on BASE, with BERT's vocabulary as above ([CLS] and [SEP] their BOS and EOS ids).
DECODER_SHAPES: dict[str, tuple[str, dict]] = {
    "gpt2-small": (  # GPT-2 (124M): 12 layers x 12 heads, D=768, 1,024 positions
        "GPT2Config",
        {
            "vocab_size": 30522,
            "n_embd": 768,
            "n_layer": 12,
            "n_head": 12,
            "n_positions": 1024,
            "activation_function": "gelu_new",
            "bos_token_id": 101,
            "eos_token_id": 102,
        },
    ),
    "llama-1b": (  # Llama-3.2-1B: 16 layers, 32 query and 8 key/value heads, D=2048
        "LlamaConfig",
        {
            "vocab_size": 30522,
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_hidden_layers": 16,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 64,
            "max_position_embeddings": 131072,
            "rms_norm_eps": 1e-5,
            "rope_theta": 500000.0,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 32.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
            "tie_word_embeddings": True,
            "hidden_act": "silu",
            "bos_token_id": 101,
            "eos_token_id": 102,
        },
    ),
    "qwen2-0.5b": (  # Qwen2-0.5B: 24 layers, 14 query and 2 key/value heads, D=896
        "Qwen2Config",
        {
            "vocab_size": 30528,  # BERT's 30,522 and what Qwen2's tokenizer class adds
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_hidden_layers": 24,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
            "max_position_embeddings": 32768,
            "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0,
            "use_sliding_window": False,
            "tie_word_embeddings": True,
            "hidden_act": "silu",
            "bos_token_id": 101,
            "eos_token_id": 102,
        },
    ),
    "pythia-160m": (  # Pythia-160M (GPT-NeoX): 12 layers x 12 heads, D=768, RoPE on 1/4
        "GPTNeoXConfig",
        {
            "vocab_size": 30522,
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "max_position_embeddings": 2048,
            "rotary_pct": 0.25,
            "rotary_emb_base": 10000,
            "use_parallel_residual": True,
            "tie_word_embeddings": False,
            "layer_norm_eps": 1e-5,
            "hidden_act": "gelu",
            "bos_token_id": 101,
            "eos_token_id": 102,
        },
    ),
}
SHAPES.update(DECODER_SHAPES)

# A tiny random checkpoint of every family (`jaxattn.config.FAMILIES`; the GPU run's
# `sanity-families` check, which fails for a family missing here): family -> (a SHAPES
# name, or a transformers config class for a family SHAPES lacks; the fields replacing
# its). Odd widths, two layers (ModernBERT three), sharp softmaxes (initializer_range
# 0.25), and every window shorter than the check's 24 tokens, so sliding, local and
# global layers all differ from full attention; the decoders' heads grouped (GQA).
_ENCODER = dict(
    hidden_size=24,
    num_hidden_layers=2,
    num_attention_heads=3,
    intermediate_size=37,
    max_position_embeddings=64,
    initializer_range=0.25,
)
_DECODER = dict(
    vocab_size=30522,
    hidden_size=24,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=6,
    intermediate_size=37,
    max_position_embeddings=64,
    initializer_range=0.25,
    tie_word_embeddings=True,
    bos_token_id=101,
    eos_token_id=102,
)
_SLIDING_FIRST = ["sliding_attention", "full_attention"]
TINY_FAMILIES: dict[str, tuple[str, dict]] = {
    "bert": ("bert-base", _ENCODER),
    "roberta": ("xlm-roberta-base", {**_ENCODER, "max_position_embeddings": 66}),
    "distilbert": (
        "DistilBertConfig",
        dict(vocab_size=30522, dim=24, n_layers=2, n_heads=3, hidden_dim=37)
        | dict(max_position_embeddings=64, initializer_range=0.25),
    ),
    "electra": ("electra-base", {**_ENCODER, "embedding_size": 13}),
    "albert": ("albert-base", {**_ENCODER, "embedding_size": 13}),
    "deberta-v2": ("deberta-v3-base", {**_ENCODER, "position_buckets": 8}),
    "modernbert": (
        "modernbert-base",
        {**_ENCODER, "num_hidden_layers": 3, "global_attn_every_n_layers": 2, "local_attention": 8},
    ),
    "gpt2": ("gpt2-small", dict(n_embd=24, n_layer=2, n_head=3, n_positions=64)),
    "llama": (  # Llama-3.2-1B's positions: its llama3 rope scaling starts at 8,192
        "llama-1b",
        {k: v for k, v in _DECODER.items() if k != "max_position_embeddings"},
    ),
    "mistral": ("MistralConfig", {**_DECODER, "sliding_window": 7}),
    "qwen2": (  # layer 0 full, layer 1 sliding (from max_window_layers on)
        "qwen2-0.5b",
        {**_DECODER, "vocab_size": 30528, "use_sliding_window": True, "sliding_window": 9}
        | {"max_window_layers": 1},
    ),
    "qwen3": (
        "Qwen3Config",
        {**_DECODER, "vocab_size": 30528, "use_sliding_window": True, "sliding_window": 6}
        | {"layer_types": _SLIDING_FIRST},
    ),
    "gemma2": (  # soft-capped scores, query_pre_attn_scalar, a sliding and a global layer
        "Gemma2Config",
        {**_DECODER, "query_pre_attn_scalar": 7, "sliding_window": 9}
        | {"attn_logit_softcapping": 3.0, "final_logit_softcapping": 5.0},
    ),
    "gemma3": (
        "Gemma3TextConfig",
        {**_DECODER, "query_pre_attn_scalar": 7, "sliding_window": 9}
        | {"layer_types": _SLIDING_FIRST},
    ),
    "gpt_neox": (  # 4 heads of 6, rotary_pct 0.5: 3 rotary dims (odd), a parallel residual
        "pythia-160m",
        dict(hidden_size=24, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
        | dict(max_position_embeddings=64, initializer_range=0.25, rotary_pct=0.5),
    ),
}


def random_checkpoint(name: str, out_dir: Path, **overrides) -> Path:
    """Write the random-weight checkpoint `name` (a key of SHAPES) into out_dir.

    overrides: config fields that replace the shape's (a tiny model of the same
    family and tokenizer, say ``num_hidden_layers=2, hidden_size=48``).

    Raises:
      UsageError: an unknown name, naming the known ones.
    """
    if name not in SHAPES:  # before the slow imports
        raise UsageError(f"unknown synthetic model {name!r}: valid are {', '.join(SHAPES)}")
    cls, fields = SHAPES[name]
    base = {} if name in DECODER_SHAPES else BASE
    return _write(cls, {**base, **fields, **overrides}, out_dir)


def tiny_checkpoint(family: str, out_dir: Path) -> Path:
    """Write the tiny random checkpoint of `family` (TINY_FAMILIES) into out_dir.

    Raises:
      UsageError: a family without one, naming TINY_FAMILIES.
    """
    if family not in TINY_FAMILIES:
        raise UsageError(
            f"no tiny checkpoint of family {family!r}: add it to "
            f"jaxattn.bench.synthetic.TINY_FAMILIES (valid are {', '.join(TINY_FAMILIES)})"
        )
    shape, fields = TINY_FAMILIES[family]
    if shape in SHAPES:
        return random_checkpoint(shape, out_dir, **fields)
    return _write(shape, fields, out_dir)


def _write(cls: str, fields: dict, out_dir: Path) -> Path:
    """The random-weight model of transformers config class `cls` with `fields`, seed 0,
    and the benchmark tokenizer, written into out_dir."""
    import torch
    import transformers

    from jaxattn.checkpoints.loading import default_model_dir

    config = getattr(transformers, cls)(**fields)
    torch.manual_seed(0)
    transformers.AutoModel.from_config(config).save_pretrained(str(out_dir))
    source = Path(os.environ[TOKENIZER_ENV]) if os.environ.get(TOKENIZER_ENV) else None
    files = [
        f
        for f in (source or default_model_dir()).iterdir()
        if f.name.startswith(("tokenizer", "vocab", "special"))
    ]
    if not any(f.name == "tokenizer.json" for f in files):
        raise FileNotFoundError(
            f"{TOKENIZER_ENV}={source} holds no tokenizer.json: name a "
            "copy of the embedded model's tokenizer files"
        )
    for f in files:
        shutil.copy(f, out_dir / f.name)
    return out_dir
