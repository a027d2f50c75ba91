"""Tiny, random, offline Gemma 2 and Gemma 3 (text) checkpoints for tests.

    from gemma_fixture import make_gemma_checkpoint
    path = make_gemma_checkpoint("gemma2", tmp_path / "g2")   # Gemma2ForCausalLM
    model = load_torch_model(path)                             # hf_fixtures: eager

Gemma's layout at odd sizes: D=36, H=4 query heads of head_dim 10 (H K = 40 != D),
H_kv=2 key/value heads, 3 layers local, global, local with a sliding window of 5
keys (texts run past it), intermediate 29, query_pre_attn_scalar 7 (not K), every
RMSNorm weight random (the four per layer, the final one and Gemma 3's per-head
q/k norms: hf_fixtures._randomise). Gemma 2 soft-caps its logits at 3 (so the cap
bites on these weights); Gemma 3 has RoPE base 1e4 with linear scaling (factor 4) in
its full-attention layer and base 100 in its sliding ones. The tokenizer is
llama_fixture's byte-level BPE that prepends <s>.
"""

from __future__ import annotations

from pathlib import Path

from hf_fixtures import _randomise
from llama_fixture import BOS, EOS, make_llama_tokenizer

COMMON = dict(
    hidden_size=36,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=10,
    num_hidden_layers=3,
    intermediate_size=29,
    max_position_embeddings=64,
    rms_norm_eps=1e-5,
    initializer_range=0.25,
    query_pre_attn_scalar=7,
    sliding_window=5,
)
CONFIGS = {
    "gemma2": dict(COMMON, attn_logit_softcapping=3.0, rope_parameters={"rope_theta": 500.0}),
    "gemma3": dict(
        COMMON,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
        },
    ),
}


def make_gemma_checkpoint(family: str, out_dir, *, seed: int = 0, **overrides) -> Path:
    """Write the tiny `family` ("gemma2", "gemma3") checkpoint (config, safetensors,
    tokenizer) to `out_dir`, as the family's ForCausalLM (its head tied)."""
    import torch
    import transformers

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = make_llama_tokenizer()
    config_class, model_class = {
        "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
        "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
    }[family]
    config = getattr(transformers, config_class)(
        **{
            **CONFIGS[family],
            "vocab_size": len(tokenizer),
            "bos_token_id": tokenizer.convert_tokens_to_ids(BOS),
            "eos_token_id": tokenizer.convert_tokens_to_ids(EOS),
            "pad_token_id": None,
            **overrides,
        }
    )
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, model_class)(config).eval()
    _randomise(model, seed)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out
