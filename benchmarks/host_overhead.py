"""The host side of `Engine.capture`, by phase, in ms per 1,024 texts (issue 26).

    python benchmarks/host_overhead.py                  # tiny random BERT, 1,024 x 128 tokens
    python benchmarks/host_overhead.py --model DIR --n 4096 --tokens 256 --json out.json

A whole `Engine.capture(texts, what=...)` is timed (best of --repeats), and the
time it spent waiting in `host.host_blocks` for the device (its compute and
copies) is taken out: what is left is host-side work. Then the same call's
phases are run one after the other, as the pipeline runs them, each timed on
its own: check_texts + tokenizer (tokenize), the request's spec and the texts'
position checks (spec), the layer-group sizes and the batch plan (plan),
`host.pack` + placing + starting the step (dispatch), waiting for the outputs
(device, not host work), `host.unpack` into Captures (unpack) and their input
order (in_order), by the wall clock and by the CPU time of the calling
thread (the Python side's own work, which a loaded machine disturbs less;
the tokenizer's Rust threads and XLA's are not in it). The model is a tiny
random BERT by default, so that the device's part is small; on a GPU give
--model a real-sized one.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from gpu_checks import TINY

PHASES = ("tokenize", "spec", "plan", "dispatch", "device", "unpack", "in_order")


def phases(engine, texts, what, clock=time.perf_counter) -> dict[str, float]:
    """Seconds of each phase of one capture of `texts`, run one after the other, by
    `clock` (wall time, or `time.thread_time`: this thread's CPU, the Python side's,
    without the tokenizer's and XLA's threads)."""
    from jaxattn.engine import host
    from jaxattn.engine.pipeline import in_order

    took = dict.fromkeys(PHASES, 0.0)

    t = clock()
    tokenized = engine.tokenize(texts)
    took["tokenize"] = clock() - t

    t = clock()
    spec = engine.make_spec(what)
    spec.check_examples((i, e.length) for i, e in enumerate(tokenized))
    took["spec"] = clock() - t

    t = clock()
    engine.pipeline.group_sizes(tokenized, spec)
    plan = engine.plan(tokenized, spec)
    took["plan"] = clock() - t

    pairs = []
    for batch in plan:
        t = clock()
        out = engine.dispatch(batch, tokenized, spec)
        took["dispatch"] += clock() - t
        t = clock()
        blocks = host.host_blocks(out)  # waits for the outputs on the host
        took["device"] += clock() - t
        t = clock()
        pairs += list(host.unpack(batch, blocks, tokenized, spec, engine.provenance))
        took["unpack"] += clock() - t
    t = clock()
    got = list(in_order(pairs))
    took["in_order"] = clock() - t
    assert len(got) == len(texts)
    return took


def whole(engine, texts, what) -> tuple[float, float]:
    """(wall seconds of one `Engine.capture`, seconds of it spent in `host.host_blocks`)."""
    from jaxattn.engine import host

    waited = [0.0]
    original = host.host_blocks

    def timed(out):
        t = time.perf_counter()
        try:
            return original(out)
        finally:
            waited[0] += time.perf_counter() - t

    host.host_blocks = timed
    try:
        t = time.perf_counter()
        engine.capture(texts, what=what)
        wall = time.perf_counter() - t
    finally:
        host.host_blocks = original
    return wall, waited[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1024, help="texts per call (default 1024)")
    p.add_argument("--tokens", type=int, default=128, help="tokens per text (default 128)")
    p.add_argument("--model", type=Path, help="a checkpoint directory (default: tiny random BERT)")
    p.add_argument("--what", default="attention")
    p.add_argument("--repeats", type=int, default=5, help="best of (default 5)")
    p.add_argument("--json", type=Path, help="also write the result here")
    args = p.parse_args()

    import jaxattn
    from jaxattn.bench.capture import fitted_texts
    from jaxattn.bench.synthetic import random_checkpoint

    what = tuple(args.what.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model is None:
            tiny = {
                **TINY,
                "max_position_embeddings": max(TINY["max_position_embeddings"], args.tokens),
            }
            model = random_checkpoint("bert-base", Path(tmp), **tiny)
        engine = jaxattn.load(str(model), compilation_cache_dir=False)
        # --tokens as this model's tokenizer counts them (another reads BERT's words
        # otherwise: a random Qwen2's letter by letter)
        texts = fitted_texts(engine, args.tokens, args.n)
        engine.capture(texts, what=what)  # compiles
        engine.capture(texts, what=what)
        runs = [whole(engine, texts, what) for _ in range(args.repeats)]
        split = [phases(engine, texts, what) for _ in range(args.repeats)]
        cpu = [phases(engine, texts, what, time.thread_time) for _ in range(args.repeats)]
    per = 1024 / args.n * 1e3  # ms per 1,024 texts
    wall, waited = min(runs)
    best = {k: min(s[k] for s in split) * per for k in PHASES}
    best_cpu = {k: min(s[k] for s in cpu) * per for k in PHASES}
    result = dict(
        n=args.n,
        tokens=args.tokens,
        lengths=sorted({e.length for e in engine.tokenize(texts)}),
        model=engine.info.name,
        device=str(engine.devices[0].platform),
        cpus=os.cpu_count(),
        load_average=os.getloadavg(),
        capture_ms=wall * per,
        capture_host_ms=(wall - waited) * per,
        texts_per_s=args.n / wall,
        phases_ms=best,
        phases_host_ms=sum(v for k, v in best.items() if k != "device"),
        phases_thread_cpu_ms=best_cpu,
        phases_host_thread_cpu_ms=sum(v for k, v in best_cpu.items() if k != "device"),
    )
    print(
        f"{args.n} texts x {args.tokens} tokens, {result['model']} on {result['device']} "
        f"({result['cpus']} cpus, load {result['load_average'][0]:.2f}); ms per 1,024 texts:"
    )
    print(
        f"  capture {result['capture_ms']:.1f} (host {result['capture_host_ms']:.1f}, "
        f"waiting for the device {waited * per:.1f}), {result['texts_per_s']:.0f} texts/s"
    )
    print("  phases, one after the other: " + ", ".join(f"{k} {v:.1f}" for k, v in best.items()))
    print(f"  host phases together {result['phases_host_ms']:.1f}")
    print("  this thread's CPU: " + ", ".join(f"{k} {v:.1f}" for k, v in best_cpu.items()))
    print(f"  host phases together {result['phases_host_thread_cpu_ms']:.1f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
