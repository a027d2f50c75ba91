"""Tiny, random, offline Mistral, Qwen2 and Qwen3 checkpoints (Llama's relatives).

    from llama_variants_fixture import make_variant_checkpoint
    path = make_variant_checkpoint("qwen3", tmp_path / "qwen3")

Each at odd sizes with grouped-query attention (H / H_kv > 1), every RMSNorm
weight and every bias random (hf_fixtures._randomise: Qwen2's q/k/v biases,
Qwen3's q_norm/k_norm weights and its attention_bias biases), sliding windows
shorter than the test texts, and Llama's fixture tokenizer (byte-level BPE,
BOS prepended; a word table of 305 rows):
* mistral: D=40, H=4, H_kv=2 (K=10), sliding_window 7 in every layer,
  MistralForCausalLM;
* qwen2: D=36, H=6, H_kv=2 (K=6), use_sliding_window with window 9 and
  max_window_layers 1 (layer 0 full, layers 1-2 sliding), the bare Qwen2Model;
* qwen3: D=36, H=4, H_kv=2, head_dim 8 given (H K = 32 != D), attention_bias,
  layer_types [sliding, full, sliding] with window 6, Qwen3ForCausalLM.
"""

from __future__ import annotations

from pathlib import Path

from hf_fixtures import _randomise
from llama_fixture import BOS, EOS, make_llama_tokenizer

COMMON = dict(
    num_hidden_layers=3,
    intermediate_size=29,
    max_position_embeddings=64,
    rms_norm_eps=1e-5,
    initializer_range=0.25,
)
VARIANTS = {
    "mistral": dict(
        hidden_size=40,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=7,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    ),
    "qwen2": dict(
        lm_head=False,
        hidden_size=36,
        num_attention_heads=6,
        num_key_value_heads=2,
        use_sliding_window=True,
        sliding_window=9,
        max_window_layers=1,
        rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
    ),
    "qwen3": dict(
        hidden_size=36,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        attention_bias=True,
        use_sliding_window=True,
        sliding_window=6,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    ),
}


def make_variant_checkpoint(family: str, out_dir, *, seed: int = 0, **overrides) -> Path:
    """Write the tiny `family` checkpoint (config, safetensors, tokenizer) to `out_dir`."""
    import torch
    import transformers

    prefix = {"mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3"}[family]
    fields = {**COMMON, **VARIANTS[family], **overrides}
    lm_head = fields.pop("lm_head", True)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = make_llama_tokenizer()
    config = getattr(transformers, f"{prefix}Config")(
        **fields,
        # Five spare rows: AutoTokenizer reads a qwen2/qwen3 directory as Qwen2Tokenizer,
        # which adds <|endoftext|> (id 300) to the trained vocabulary.
        vocab_size=len(tokenizer) + 5,
        bos_token_id=tokenizer.convert_tokens_to_ids(BOS),
        eos_token_id=tokenizer.convert_tokens_to_ids(EOS),
    )
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    cls = getattr(transformers, f"{prefix}ForCausalLM" if lm_head else f"{prefix}Model")
    model = cls(config).eval()
    _randomise(model, seed)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out
