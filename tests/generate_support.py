"""The tiny random decoders of the generation tests, with transformers' references.

GPT-2 (tied head), Llama (an untied lm_head.weight, BOS prepended by its
tokenizer), Gemma 2 (tied, its logits soft-capped at 2), GPT-NeoX (Pythia's untied
embed_out, partial rotary, parallel residual).
"""

from __future__ import annotations

from pathlib import Path

import torch
from gemma_fixture import make_gemma_checkpoint  # noqa: E402
from gpt2_fixture import make_gpt2_checkpoint  # noqa: E402
from gpt_neox_fixture import make_gpt_neox_checkpoint  # noqa: E402
from llama_fixture import make_llama_checkpoint  # noqa: E402

import jaxattn

PROMPTS = ["The quick brown fox", "Hello, world. Hello,", "a"]
MAKERS = {
    "gpt2": lambda d: make_gpt2_checkpoint(d),
    "llama": lambda d: make_llama_checkpoint(d),  # an untied lm_head.weight
    "gemma2": lambda d: make_gemma_checkpoint("gemma2", d, final_logit_softcapping=2.0),
    "gpt_neox": lambda d: make_gpt_neox_checkpoint(d),  # untied embed_out, parallel residual
}


def load_pair(name: str, tmp: Path, **load):
    """(engine, transformers' eager ...ForCausalLM) of the tiny `name` decoder; `load`:
    more of `jaxattn.load`'s arguments (max_batch=...)."""
    from transformers import AutoModelForCausalLM

    path = MAKERS[name](tmp)
    engine = jaxattn.load(path, buckets=(32,), **load)
    torch_model = AutoModelForCausalLM.from_pretrained(
        str(path), attn_implementation="eager", local_files_only=True
    ).eval()
    return engine, torch_model


def torch_generate(torch_model, ids, new, eos=None) -> list[int]:
    """transformers' greedy continuation of one prompt's ids (generate(do_sample=False)),
    cut after its EOS (`eos`: the EOS id; -1: none)."""
    kwargs = {} if eos is None else {"eos_token_id": eos}
    with torch.no_grad():
        out = torch_model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            do_sample=False,
            max_new_tokens=new,
            pad_token_id=0,
            **kwargs,
        )
    return [int(t) for t in out[0, len(ids) :]]


def pair_cache(tmp_path_factory):
    """name -> (name, engine, torch model), each loaded once per test module (the
    module's tests that need one family take it from here rather than skipping
    the others' parametrisations)."""
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            cache[name] = (name, *load_pair(name, tmp_path_factory.mktemp(name)))
        return cache[name]

    return get
