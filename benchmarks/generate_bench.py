"""Greedy generation with the key/value cache against the whole-sequence step it replaced,
and against transformers' own cached ``generate``, in one run.

    .venv/bin/python benchmarks/generate_bench.py [--model gpt2-small] [--prompt 32]
        [--new 64] [--batch 1 8] [--rounds 3]

A random-weight synthetic decoder (`jaxattn.bench.synthetic`, with the embedded
model's tokenizer), `batch` prompts of about `prompt` tokens, each continued by `new`
tokens (EOS ignored), timed after a first call that compiles:
* cached: `Engine.generate` (`jaxattn.engine.kv_cache`: a prefill, then one token's
  forward a step);
* whole-sequence: each step one forward of every sequence so far through the capture
  program's final hidden states (`final_states`) and the argmax of its last position,
  the loop `Engine.generate` ran before the cache (reproduced here as the baseline);
* transformers: ``AutoModelForCausalLM.generate(do_sample=False)`` (its DynamicCache),
  float32 eager, torch on the same cores.
Prints one JSON line per (batch) and a Markdown row; the three continuations are
compared token for token (random weights make near ties, so a difference is counted,
not fatal).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]


# The smoke run's sizes, by the preset's transformers config class.
_SMALL = dict(num_hidden_layers=2, hidden_size=48, intermediate_size=64, num_attention_heads=4)
_TINY = {
    "GPT2Config": dict(n_layer=2, n_embd=48, n_head=4),
    "LlamaConfig": dict(_SMALL, num_key_value_heads=2, head_dim=12),
    "Qwen2Config": dict(_SMALL, num_key_value_heads=2),
}


def _best(f, rounds: int) -> tuple[float, object]:
    out, times = None, []
    for _ in range(rounds):
        start = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - start)
    return min(times), out


def whole_sequence_generate(engine, texts, new: int) -> list[list[int]]:
    """The step before the cache: every step one forward of the whole sequence so far."""
    import dataclasses

    import numpy as np

    from jaxattn.engine.causal_lm import unembedding
    from jaxattn.engine.mlm import final_states

    w = np.asarray(unembedding(engine), np.float32)
    prompts = engine.tokenize(texts)
    grown = [[] for _ in prompts]
    for _ in range(new):
        seqs = [
            dataclasses.replace(
                p,
                ids=p.ids + tuple(g),
                type_ids=(0,) * (p.length + len(g)),
                tokens=("",) * (p.length + len(g)),
            )
            for p, g in zip(prompts, grown, strict=True)
        ]
        states = final_states(engine, seqs, None)
        last = np.stack([h[-1] for h in states]).astype(np.float32)
        for g, t in zip(grown, (last @ w.T).argmax(-1), strict=True):
            g.append(int(t))
    return grown


def transformers_generate(model, engine, texts, new: int) -> list[list[int]]:
    import torch

    prompts = engine.tokenize(texts)
    ids = torch.tensor([list(p.ids) for p in prompts])  # equal lengths: no padding
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=new,
            min_new_tokens=new,
            pad_token_id=0,
        )
    return [[int(t) for t in row[ids.shape[1] :]] for row in out]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2-small")
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-baseline", action="store_true", help="skip the whole-sequence loop")
    parser.add_argument("--tiny", action="store_true", help="2 layers, width 48 (a smoke run)")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    import jaxattn
    from jaxattn.bench.capture import machine, synthetic_texts
    from jaxattn.bench.synthetic import SHAPES, random_checkpoint

    torch.set_num_threads(2)
    tiny = _TINY[SHAPES[args.model][0]] if args.tiny else {}
    path = random_checkpoint(args.model, Path(tempfile.mkdtemp()), **tiny)
    engine = jaxattn.load(path)
    model = AutoModelForCausalLM.from_pretrained(str(path), attn_implementation="eager").eval()
    print(f"# {args.model}, {machine()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(
        "| batch | prompt | new | cached s | whole-sequence s | transformers s | cached tok/s "
        "| whole/cached | transformers/cached | equal tokens (whole, transformers) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for batch in args.batch:
        _one(engine, model, args, batch, synthetic_texts(args.prompt, batch))


def _one(engine, model, args, batch: int, texts: list[str]) -> None:
    """Time the three generations of `batch` texts; print the JSON line and the row."""
    length = engine.tokenize(texts[:1])[0].length

    def cached():
        return [list(g.ids) for g in engine.generate(texts, args.new, stop_at_eos=False)]

    cached()  # compiles
    t_cached, ids = _best(cached, args.rounds)
    t_whole, whole = float("nan"), None
    if not args.no_baseline:
        whole_sequence_generate(engine, texts, 2)  # compiles the first buckets
        t_whole, whole = _best(lambda: whole_sequence_generate(engine, texts, args.new), 1)
    transformers_generate(model, engine, texts, 2)  # its first call's setup
    t_torch, theirs = _best(lambda: transformers_generate(model, engine, texts, args.new), 1)

    def same(other):
        if other is None:
            return "-"
        pairs = zip(ids, other, strict=True)
        return sum(a == b for x, y in pairs for a, b in zip(x, y, strict=True))

    total = batch * args.new
    row = dict(
        model=args.model,
        batch=batch,
        prompt=length,
        new=args.new,
        cached_s=round(t_cached, 3),
        whole_s=round(t_whole, 3),
        transformers_s=round(t_torch, 3),
        cached_tokens_per_s=round(total / t_cached, 1),
        equal_whole=same(whole),
        equal_transformers=same(theirs),
        of=total,
    )
    print(json.dumps(row), file=sys.stderr, flush=True)
    print(
        f"| {batch} | {length} | {args.new} | {t_cached:.2f} | {t_whole:.2f} | {t_torch:.2f} "
        f"| {total / t_cached:.0f} | {t_whole / t_cached:.1f}x | {t_torch / t_cached:.2f}x "
        f"| {row['equal_whole']}, {row['equal_transformers']} of {total} |",
        flush=True,
    )


if __name__ == "__main__":
    main()
