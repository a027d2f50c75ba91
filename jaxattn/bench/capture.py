"""The capture benchmark (issues 2, 12): jaxattn against transformers' eager attention.

On the first N sentences of an input file (CoNLL-U: each sentence's own text),
in file order:
  (a) transformers BertModel, eager attention, batches of 32 padded to the
      longest, output_attentions=True, attentions copied to numpy;
  (b) jaxattn forward, no capture (final hidden state only);
  (c) jaxattn attention only;
  (d) jaxattn full capture: attention, queries, keys, fx_norm, alpha_fx_norm,
      sum_alpha_fx_norm;
  (e) jaxattn attention as uint8;
  (f) transformers' plain forward: its default attention (SDPA), no attentions
      returned, the final hidden state copied to numpy: what (b) is held to.
Each is timed after a warm-up pass (compilation excluded; it is reported
separately), best of `repeats` interleaved rounds. torch is imported only for (a).
Beside the times: the host-bound rate (bytes the copy moved per second in (c),
(d), (e)) against a copy of the same bytes timed in the same run
(`jaxattn.bench.copy_rate`). `precision` sets jaxattn's compute precision
(transformers stays float32).
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from pathlib import Path

from jaxattn.bench.copy_rate import host_copy_rate, moved_bytes
from jaxattn.bench.sentences import read_sentences
from jaxattn.errors import InputError, TooLongError, UsageError

FULL = ("attention", "queries", "keys", "fx_norm", "alpha_fx_norm", "sum_alpha_fx_norm")


def transformers_runners(model_dir: Path, texts: list[str], batch: int) -> dict:
    """Cases (a) and (f) as zero-argument callables over one loaded model.

    (a) runs the eager attention with output_attentions=True (transformers 5 returns
    attentions only from it); (f) the implementation `from_pretrained` picks by itself
    (SDPA where the family has it), no attentions. One model switched between the two
    (`set_attn_implementation`), not two: a 1B decoder's weights are 5 GB in float32.
    Runs on CUDA when torch sees a GPU, else on the CPU.
    """
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    if tok.pad_token is None:  # a decoder's (GPT-2, Llama): batches pad with another token,
        # which the attention mask hides (as transformers' own advice has it)
        tok.pad_token = tok.eos_token or tok.bos_token or tok.unk_token
        if tok.pad_token is None:
            raise InputError(
                None,
                f"the tokenizer of {model_dir} has no padding, end, start or unknown token "
                "to pad transformers' batches with: bench cannot time it",
            )
    model = AutoModel.from_pretrained(str(model_dir)).eval().to(device)
    default = model.config._attn_implementation

    def runner(attentions: bool):
        implementation = "eager" if attentions else default

        def run():
            if model.config._attn_implementation != implementation:
                model.set_attn_implementation(implementation)
            with torch.inference_mode():
                for i in range(0, len(texts), batch):
                    x = tok(texts[i : i + batch], padding="longest", return_tensors="pt")
                    out = model(**x.to(device), output_attentions=attentions)
                    if attentions:
                        [np.asarray(a.cpu().numpy()) for a in out.attentions]
                    else:
                        np.asarray(out.last_hidden_state.cpu().numpy())

        return run

    return {"a_transformers": runner(True), "f_transformers_forward": runner(False)}


def random_bert_base(out_dir: Path) -> Path:
    """A random-weight BERT-base checkpoint (12 x 12, D=768) with the embedded MiniLM's
    tokenizer, which is BERT's uncased vocabulary (the GPU benchmark's model)."""
    from jaxattn.bench.synthetic import random_checkpoint

    return random_checkpoint("bert-base", out_dir)


WORDS = "the quick brown fox jumps over the lazy dog".split()


def synthetic_texts(length: int, n: int) -> list[str]:
    """n texts of exactly `length` tokens with BERT's uncased vocabulary (one token a
    word, [CLS] and [SEP] around them); `fitted_texts` for another tokenizer."""
    text = " ".join(WORDS[i % len(WORDS)] for i in range(length - 2))  # + [CLS] [SEP]
    return [text] * n


def fitted_texts(engine, length: int, n: int) -> list[str]:
    """n texts of exactly `length` tokens, special tokens included, as `engine`'s own
    tokenizer counts them. A checkpoint's tokenizer class follows its model type: a
    random Qwen2 with BERT's vocabulary files reads `synthetic_texts` letter by letter
    (128 asked, 492 run), so a benchmark's T must be counted by the model's tokenizer.

    Raises:
      InputError: no text of `length` tokens can be made (the model's limit, or a
        tokenizer that adds more than one token for every filler word).
    """
    limit = engine.info.max_positions
    if length > limit:
        raise InputError(None, f"--tokens {length}: the model reads at most {limit} tokens")

    def text(words: int, filler: int) -> str:  # WORDS' first `words`, then `filler` a's
        return " ".join([WORDS[i % len(WORDS)] for i in range(words)] + ["a"] * filler)

    def count(words: int, filler: int = 0) -> int:
        (t,) = engine.tokenize([text(words, filler)], too_long="truncate")
        return limit + 1 if t.truncated else t.length

    lo, hi = 0, length  # the most words whose count is at most `length` (a word: >= 1 token)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if count(mid) <= length else (lo, mid - 1)
    filler = 0
    while (got := count(lo, filler)) < length and filler < length:
        filler += 1
    if got != length:
        raise InputError(
            None,
            f"cannot make a text of exactly {length} tokens for {engine.info.name}'s "
            f"tokenizer (the nearest has {got})",
        )
    return [text(lo, filler)] * n


def jaxattn_runners(engine, texts: list[str]) -> dict:
    """Cases (b)-(e) as zero-argument callables."""
    return {name: (lambda kw=kw: engine.capture(texts, **kw)) for name, kw in cases(engine).items()}


def cases(engine) -> dict[str, dict]:
    """The jaxattn cases' capture arguments."""
    return {
        "b_forward": dict(what="hidden_states", layers=engine.config.num_layers - 1),
        "c_attention": dict(what="attention"),
        "d_full": dict(what=FULL),
        "e_attention_uint8": dict(what="attention", dtype="uint8"),
    }


def run(
    conllu: Path | None,
    n: int = 512,
    repeats: int = 3,
    model: str | None = None,
    texts: list[str] | None = None,
    tokens: int | None = None,
    precision: str = "highest",
    too_long: str = "error",
    layer_loop: str | None = None,
    attention: str = "auto",
    attention_block: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Run all cases, interleaved: each round times (a) to (f) in turn (jaxattn's
    engine loaded with `layer_loop`, `attention` and `attention_block`). `progress` is
    given a line as each step ends (the load, each case's first pass, each round), so a run stopped
    at a time limit has said how far it came. `texts`: the texts to time (default:
    the first `n` sentences of `conllu`); `tokens`: instead, `n` texts of exactly that
    many tokens as the model's tokenizer counts them (`fitted_texts`).

    Interleaving exposes every case to the same machine state, so the ratios
    hold even when the machine is shared; each case reports its best round.
    The first pass of each case (compilation, warm caches) is timed apart.
    """
    import jaxattn
    from jaxattn.checkpoints.loading import default_model_dir

    say = progress or (lambda line: None)
    if tokens is not None and texts is not None:
        raise UsageError("bench.run takes texts or tokens (texts of that length), not both")
    if tokens is None:
        texts = texts if texts is not None else read_sentences(conllu, n)
    t = time.perf_counter()
    engine = jaxattn.load(
        model,
        precision=precision,
        layer_loop=layer_loop,
        attention=attention,
        attention_block=attention_block,
    )
    say(f"loaded {engine.info.name} in {time.perf_counter() - t:.1f} s")
    if tokens is not None:  # counted by this model's tokenizer (`fitted_texts`)
        texts = fitted_texts(engine, tokens, n)
    # The torch reference takes whole texts: too-long ones are refused or left out.
    try:
        kept = engine.tokenize(texts, too_long=too_long)
    except TooLongError as e:
        raise InputError(
            None,
            f"{e.summary}: bench times whole texts; leave such texts out "
            "with --too-long skip, or give fewer --tokens",
        ) from None
    texts = [t for t, k in zip(texts, kept, strict=True) if k is not None]
    if not texts:
        limit = engine.info.max_positions
        raise InputError(
            None,
            f"no text left to time: all {len(kept)} are over the model's "
            f"limit of {limit} tokens (--too-long skip)",
        )
    model_dir = Path(model) if model else default_model_dir()
    t = time.perf_counter()
    reference = transformers_runners(model_dir, texts, 32)
    say(f"transformers' reference loaded in {time.perf_counter() - t:.1f} s")
    runners = {"a_transformers": reference["a_transformers"]}
    runners |= jaxattn_runners(engine, texts)
    runners["f_transformers_forward"] = reference["f_transformers_forward"]
    res = {
        "n": len(texts),
        "model": engine.info.name,
        "machine": machine(),
        "repeats": repeats,
        "precision": precision,
        "layer_loop": engine.step.layer_loop,
        **({"tokens": tokens} if tokens is not None else {}),
    }
    for name, fn in runners.items():
        t = time.perf_counter()
        fn()
        res[f"{name}_first_pass_s"] = time.perf_counter() - t
        say(f"{name}: first pass {res[f'{name}_first_pass_s']:.2f} s")
    # The bytes each case moves, from the plan its next runs take (a plan can change
    # as the engine compiles shapes: `batching.ShapeLedger`).
    moved = {
        name: moved_bytes(engine, texts, **kw)
        for name, kw in cases(engine).items()
        if name != "b_forward"
    }
    rounds = {name: [] for name in runners}
    for r in range(repeats):
        for name, fn in runners.items():
            t = time.perf_counter()
            fn()
            rounds[name].append(time.perf_counter() - t)
        say(
            f"round {r + 1} of {repeats}: "
            + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in rounds.items())
        )
    for name, times in rounds.items():
        res[name] = min(times)
        res[f"{name}_rounds_s"] = times
        res[f"{name}_seq_per_s"] = len(texts) / res[name]
    res["d_over_a"] = res["a_transformers"] / res["d_full"]
    res["c_over_a"] = res["a_transformers"] / res["c_attention"]
    res["d_vs_b_overhead"] = res["d_full"] / res["b_forward"] - 1
    res["b_over_f"] = res["f_transformers_forward"] / res["b_forward"]
    for name, nbytes in moved.items():
        res[f"{name}_bytes"] = nbytes
        res[f"{name}_host_gb_s"] = nbytes / res[name] / 1e9
    rate, what = host_copy_rate(res["d_full_bytes"])
    res["copy_gb_s"], res["copy_what"] = rate / 1e9, what
    return res


def machine() -> str:
    import os

    import jax

    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"jax {jax.__version__} on {jax.default_backend()}"
    )


def format_result(r: dict) -> str:
    lines = [
        f"{r['n']} sentences, model {r['model']}, precision {r.get('precision', 'highest')}, "
        f"layers {r.get('layer_loop', 'unrolled')}, {r['machine']}"
    ]
    for k, label in (
        ("a_transformers", "(a) transformers eager + attentions"),
        ("b_forward", "(b) jaxattn forward, no capture"),
        ("c_attention", "(c) jaxattn attention"),
        ("d_full", "(d) jaxattn full capture"),
        ("e_attention_uint8", "(e) jaxattn attention, uint8"),
        ("f_transformers_forward", "(f) transformers forward (SDPA)"),
    ):
        moved = f"  {r[k + '_host_gb_s']:6.2f} GB/s to the host" if k + "_bytes" in r else ""
        lines.append(f"{label:40s} {r[k]:7.3f} s  {r[k + '_seq_per_s']:8.1f} seq/s{moved}")
    lines.append(f"copy of the same bytes as (d): {r['copy_gb_s']:.2f} GB/s ({r['copy_what']})")
    lines.append(f"(c) speed-up over (a): {r['c_over_a']:.2f}x; (d): {r['d_over_a']:.2f}x")
    lines.append(f"(d) cost over (b): {100 * r['d_vs_b_overhead']:+.1f}%")
    if "b_over_f" in r:
        lines.append(f"(b) speed against transformers' plain forward (f): {r['b_over_f']:.2f}x")
    return "\n".join(lines)
