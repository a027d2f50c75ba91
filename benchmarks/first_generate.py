"""Time to the first generation, and to the first capture run in layer groups, in a new
process (issues 30 and 31: their programs through the program cache).

    JAXATTN_COMPILATION_CACHE=$(mktemp -d) python benchmarks/first_generate.py --model DIR
    (again with the same directory)                                        # cached
    JAXATTN_PROGRAM_CACHE=off ...                                          # without it

--model DIR: a decoder checkpoint; where DIR does not exist a random Llama of
`SHAPE` (8 layers, D=256, grouped heads, Llama-3.2-1B's family) is written there
first, not timed (a real model is on disk). The generation case continues
--prompts prompts by --new tokens (greedy, no EOS stop), then again (the run alone).
--groups: instead, one text of --tokens tokens captured with every layer's
attention under an output budget of --output-budget bytes, so that it runs in
layer groups (`jaxattn.engine.layer_groups`), then again.

Each run prints its outputs' sha256 (the ids, or the attention arrays): a run whose
programs the program cache loaded prints the traced run's. The first call is split as
`first_capture.py` splits it (`ProgramSpans`: the wall time in JAX's tracing, lowering
and XLA compile-or-cache-load, and the rest), with the program cache's loaded and
saved counts, and the rest split as there (`FirstRuns`: each program's first execution
against the same run again, but the programs that donate their buffers, the caches'
writes; `device_first_use`: the device's first use, probed before the first call).
"""

from __future__ import annotations

import argparse
import hashlib
import time
from pathlib import Path

import numpy as np
from first_capture import PROGRAM_EVENTS, FirstRuns, ProgramSpans, device_first_use

# A tiny-but-not-trivial Llama (`jaxattn.bench.synthetic`'s llama-1b with these fields).
SHAPE = dict(
    hidden_size=256,
    intermediate_size=1024,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=16384,  # past the llama3 scaling's original 8,192
)


def main() -> None:
    t0 = time.perf_counter()
    import jaxattn
    from jaxattn.bench.capture import fitted_texts
    from jaxattn.bench.synthetic import random_checkpoint

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, required=True, help="a decoder checkpoint directory")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--new", type=int, default=16)
    p.add_argument("--groups", action="store_true", help="a long capture in layer groups")
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--output-budget", type=int, default=64 << 20)
    args = p.parse_args()
    made = 0.0
    if not args.model.exists():  # not part of the figure
        t = time.perf_counter()
        random_checkpoint("llama-1b", args.model, **SHAPE)
        made = time.perf_counter() - t
    spans = ProgramSpans()
    load = {"output_budget": args.output_budget} if args.groups else {}
    engine = jaxattn.load(str(args.model), **load)
    if args.groups:
        texts = fitted_texts(engine, args.tokens, 1)

        def run():
            return [c.attention for c in engine.capture(texts, what=("attention",))]

        case = f"1 text of {args.tokens} tokens, every layer's attention, in layer groups"
    else:
        texts = [f"{w} " * (3 + 5 * i) for i, w in enumerate(("the", "a", "one", "x") * 8)]
        texts = texts[: args.prompts]

        def run():
            return [g.ids for g in engine.generate(texts, args.new, stop_at_eos=False)]

        case = f"{len(texts)} prompts x {args.new} new tokens"
    probe = device_first_use()
    runs = FirstRuns()
    t1, since = time.perf_counter(), time.time()
    out = run()
    t2 = time.perf_counter()
    programs = spans.wall(since)
    kinds = [spans.wall(since, (event,)) for event in PROGRAM_EVENTS]
    run()
    t3 = time.perf_counter()
    split = runs.summary()
    caches = [getattr(engine.step, "program_cache", None)]
    if not args.groups:
        caches = [getattr(engine.kv_decoder, "program_cache", None)]
    kept = [c for c in caches if c is not None]
    kept = (
        f"{sum(c.loaded for c in kept)} loaded, {sum(c.saved for c in kept)} saved"
        if kept
        else "the program cache off (or absent)"
    )
    digest = hashlib.sha256()  # the outputs' bytes: a cached run's are a traced one's
    for x in out:
        digest.update(np.ascontiguousarray(x).tobytes())
    made_note = f" (besides making the random checkpoint, {made:.1f} s)" if made else ""
    print(
        f"{case}, {engine.info.name}: import + load {t1 - t0 - made:.1f} s{made_note}, "
        f"first {t2 - t1:.2f} s = programs {programs:.2f} s ({kept}; tracing "
        f"{kinds[0]:.2f} s, lowering {kinds[1]:.2f} s, compiling or loading "
        f"{kinds[2]:.2f} s) + the rest {t2 - t1 - programs:.2f} s; "
        f"second {t3 - t2:.2f} s (the run alone); outputs' sha256 {digest.hexdigest()[:12]}"
    )
    print(f"the rest, split: {split}")
    print(f"before the first call, {probe}")


if __name__ == "__main__":
    main()
