"""A tiny, random, offline Llama checkpoint for tests (grouped-query attention).

    from llama_fixture import make_llama_checkpoint
    path = make_llama_checkpoint(tmp_path / "llama")           # LlamaForCausalLM
    model = load_torch_model(path)                              # hf_fixtures: LlamaModel, eager

Llama's layout at odd sizes: D=40, H=4 query heads, H_kv=2 key/value heads
(K=10), 3 layers, intermediate 29, every RMSNorm weight random (and every bias,
where `attention_bias` / `mlp_bias` give them: hf_fixtures._randomise). The
tokenizer is a byte-level BPE trained here on the fixture corpus whose
post-processor prepends the BOS token <s>, as Llama's tokenizers do.
"""

from __future__ import annotations

from pathlib import Path

from hf_fixtures import _CORPUS, _randomise

LLAMA_CONFIG = dict(
    hidden_size=40,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_hidden_layers=3,
    intermediate_size=29,
    max_position_embeddings=64,
    rms_norm_eps=1e-5,
    initializer_range=0.25,
    rope_theta=10000.0,
)
BOS, EOS = "<s>", "</s>"


def make_llama_tokenizer():
    """A byte-level BPE that prepends <s> to every text (add_bos_token: transformers writes
    the post-processor)."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        _CORPUS, vocab_size=300, min_frequency=1, special_tokens=[BOS, EOS], show_progress=False
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, bos_token=BOS, eos_token=EOS, add_bos_token=True
    )


def make_llama_checkpoint(out_dir, *, seed: int = 0, lm_head: bool = True, **overrides) -> Path:
    """Write the tiny Llama (config, safetensors, tokenizer) to `out_dir`.

    lm_head: save LlamaForCausalLM (keys under "model.", an untied lm_head unless
    tie_word_embeddings) instead of the bare LlamaModel.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaModel

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = make_llama_tokenizer()
    config = LlamaConfig(
        **{
            **LLAMA_CONFIG,
            "vocab_size": len(tokenizer),
            "bos_token_id": tokenizer.convert_tokens_to_ids(BOS),
            "eos_token_id": tokenizer.convert_tokens_to_ids(EOS),
            **overrides,
        }
    )
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = (LlamaForCausalLM if lm_head else LlamaModel)(config).eval()
    _randomise(model, seed)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out
