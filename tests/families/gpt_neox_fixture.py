"""A tiny, random, offline GPT-NeoX (Pythia) checkpoint for tests.

    from gpt_neox_fixture import make_gpt_neox_checkpoint
    path = make_gpt_neox_checkpoint(tmp_path / "neox")          # GPTNeoXForCausalLM
    model = load_torch_model(path)                              # hf_fixtures: GPTNeoXModel, eager

GPT-NeoX's layout at odd sizes: D=30, H=5 heads of K=6, 3 layers, intermediate
37, max_position_embeddings 64, rotary_pct 0.5: int(6 x 0.5) = 3 rotary dims,
an odd number, so HF's cos/sin are 4 wide and the first 4 of each head's 6
dimensions turn, the last 2 pass. Every LayerNorm scale and every bias is
randomised (hf_fixtures._randomise). The tokenizer is GPT-2's fixture tokenizer
(a byte-level BPE, <|endoftext|> its only special token, no BOS added), as
Pythia's is a byte-level BPE with <|endoftext|>.
"""

from __future__ import annotations

from pathlib import Path

from gpt2_fixture import ENDOFTEXT, make_gpt2_tokenizer
from hf_fixtures import _randomise

GPT_NEOX_CONFIG = dict(
    hidden_size=30,
    num_attention_heads=5,
    num_hidden_layers=3,
    intermediate_size=37,
    max_position_embeddings=64,
    rotary_pct=0.5,
    rotary_emb_base=500,
    layer_norm_eps=1e-5,
    initializer_range=0.25,
    use_parallel_residual=True,
)


def make_gpt_neox_checkpoint(out_dir, *, seed: int = 0, lm_head: bool = True, **overrides) -> Path:
    """Write the tiny GPT-NeoX (config, safetensors, tokenizer) to `out_dir`.

    lm_head: save GPTNeoXForCausalLM (keys under "gpt_neox.", its head as embed_out
    unless tie_word_embeddings) instead of the bare GPTNeoXModel. overrides: more
    GPTNeoXConfig fields (use_parallel_residual=False, rope_scaling=...).
    """
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, GPTNeoXModel

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = make_gpt2_tokenizer()
    eot = tokenizer.convert_tokens_to_ids(ENDOFTEXT)
    config = GPTNeoXConfig(
        **{
            **GPT_NEOX_CONFIG,
            "vocab_size": len(tokenizer),
            "bos_token_id": eot,
            "eos_token_id": eot,
            **overrides,
        }
    )
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = (GPTNeoXForCausalLM if lm_head else GPTNeoXModel)(config).eval()
    _randomise(model, seed)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out
