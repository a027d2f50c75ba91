"""A tiny, random, offline GPT-2 checkpoint for tests.

    from gpt2_fixture import make_gpt2_checkpoint
    path = make_gpt2_checkpoint(tmp_path / "gpt2")             # GPT2LMHeadModel, tied head
    model = load_torch_model(path)                              # hf_fixtures: GPT2Model, eager

GPT-2's layout at odd sizes: D=21, H=3 (K=7), 3 layers, n_inner=29,
n_positions=64. Every LayerNorm scale and every bias is randomised
(hf_fixtures._randomise). The tokenizer is GPT-2's: a byte-level BPE trained
here on the fixture corpus, <|endoftext|> its only special token, no BOS
added (GPT2TokenizerFast's default), so "" has no tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

from hf_fixtures import _CORPUS, _randomise

GPT2_CONFIG = dict(
    n_embd=21,
    n_head=3,
    n_layer=3,
    n_inner=29,
    n_positions=64,
    activation_function="gelu_new",
    layer_norm_epsilon=1e-5,
    initializer_range=0.25,
)
ENDOFTEXT = "<|endoftext|>"


def make_gpt2_tokenizer():
    """GPT2TokenizerFast from a byte-level BPE trained on the corpus (any text encodes)."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2TokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        _CORPUS, vocab_size=300, min_frequency=1, special_tokens=[ENDOFTEXT], show_progress=False
    )
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return GPT2TokenizerFast(
        vocab=model["vocab"],
        merges=merges,
        bos_token=ENDOFTEXT,
        eos_token=ENDOFTEXT,
        unk_token=ENDOFTEXT,
    )


def make_gpt2_checkpoint(out_dir, *, seed: int = 0, lm_head: bool = True, **overrides) -> Path:
    """Write the tiny GPT-2 (config, safetensors, tokenizer) to `out_dir`.

    lm_head: save GPT2LMHeadModel (keys under "transformer.", the head tied to
    wte) instead of the bare GPT2Model.
    """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2Model

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = make_gpt2_tokenizer()
    eot = tokenizer.convert_tokens_to_ids(ENDOFTEXT)
    config = GPT2Config(
        **{
            **GPT2_CONFIG,
            "vocab_size": len(tokenizer),
            "bos_token_id": eot,
            "eos_token_id": eot,
            **overrides,
        }
    )
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = (GPT2LMHeadModel if lm_head else GPT2Model)(config).eval()
    _randomise(model, seed)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out
