"""Layer groups (issue 31, "Outputs at this size"): one head's map of every layer of a long
text, run as one program against a group of layers at a time, on the CPU.

    python benchmarks/layer_groups.py --out benchmarks/results/DATE-layer-groups
    python benchmarks/layer_groups.py --length 1024 --layers 4     # a quick check

A random ModernBERT-shaped model (`jaxattn.bench.synthetic` "modernbert-base" with
`--layers` layers, `--hidden` wide, 8 heads; 8,192 positions), one text of exactly
`--length` tokens, the request `attention` of head 0 of every layer (blockwise, the
path `attention="auto"` takes at this length). Three sides:

  one:     `GroupPolicy(0)` (`Engine(layer_group=0)`): one program returns every
           layer's map;
  groups:  the default policy under `--budget` MiB of output budget: groups of as many
           layers as fit it, the Capture assembled on the host (what `capture` gives);
  stream:  the same groups through `Engine.capture_layers`, each group's part let go
           once read (what the server and a store do): the host never holds the example.

Memory, each side in a fresh process: its first request (compiles included), the
process's peak RSS above its RSS once loaded (VmHWM reset there: on the CPU the
device's buffers are host memory), and the compiled program's output bytes (jax's
memory analysis: the one program's, or a middle group's). Time, all sides in one
process in turn after a first round (compiles): the best of `--repeats` rounds.
Writes raw.jsonl and table.md under --out.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def kib(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def setup(model: str, length: int, budget_mib: int):
    import jaxattn
    from jaxattn.bench.capture import synthetic_texts

    engine = jaxattn.load(model, buckets=(length,), output_budget=budget_mib << 20)
    return engine, synthetic_texts(length, 1)


def request(engine, texts, side: str) -> None:
    """One capture of every layer's head-0 map, as `side` takes it (module docstring)."""
    from jaxattn.engine.layer_groups import GroupPolicy

    engine.pipeline.group_policy = GroupPolicy(0 if side == "one" else None)
    ask = dict(what="attention", heads=[0])
    if side == "stream":
        n = 0
        for _, part in engine.capture_layers(texts, **ask):
            n += part.tensors["attention"].shape[0]
            del part
        assert n == engine.config.num_layers
    else:
        cap = engine.capture(texts, **ask)[0]
        assert cap.attention.shape[0] == engine.config.num_layers


def program_output_mib(engine, texts, side: str) -> tuple[int, float]:
    """(layers a group, output MiB of the compiled program: the one program's, or a
    middle group's, which takes a hidden state in and hands one on)."""
    import numpy as np

    from jaxattn.engine import host, layer_groups
    from jaxattn.engine.batching import Batch

    step, spec = engine.step, engine.make_spec(what="attention", heads=[0])
    tokenized = engine.tokenize(texts)
    length = tokenized[0].length
    size = 0 if side == "one" else engine.pipeline.group_sizes(tokenized, spec)[0]
    arrays = step.place(*host.pack(Batch(length, 1, (0,)), tokenized, engine.config, spec))
    if size:
        groups = layer_groups.groups_of(spec, size)
        g = groups[1] if len(groups) > 1 else groups[0]
        x = None
        if g.start:
            x = step.place(np.zeros((1, length, engine.config.hidden_size), np.float32))[0]
        compiled = step.lower_group(spec, g.span, x, *arrays).compile()
    else:
        compiled = step._jit.trace(spec, step.params, *arrays, None).lower().compile()
    mib = compiled.memory_analysis().output_size_in_bytes / 2**20
    return size or engine.config.num_layers, mib


def memory(side: str, model: str, length: int, budget_mib: int) -> dict:
    """A fresh process's one request (compiles included): its peak RSS above the RSS
    once loaded (VmHWM reset there; the CPU's device buffers are host memory)."""
    engine, texts = setup(model, length, budget_mib)
    before = kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    request(engine, texts, side)
    grown = (kib("VmHWM") - before) / 1024
    layers, mib = program_output_mib(engine, texts, side)
    return dict(side=side, group_layers=layers, program_output_mib=mib, grown_mib=grown)


def timing(model: str, length: int, budget_mib: int, repeats: int) -> dict:
    """One process, the sides in turn, `repeats` rounds after a first one (compiles):
    the best time of each side."""
    engine, texts = setup(model, length, budget_mib)
    for side in SIDES:
        request(engine, texts, side)
    best = dict.fromkeys(SIDES, float("inf"))
    for _ in range(repeats):
        for side in SIDES:
            t = time.perf_counter()
            request(engine, texts, side)
            best[side] = min(best[side], time.perf_counter() - t)
    return best


SIDES = ("one", "groups", "stream")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--length", type=int, default=4096)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--budget", type=int, default=64, help="output budget, MiB")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path)
    p.add_argument("--memory", nargs=4, help=argparse.SUPPRESS)  # side model length budget
    p.add_argument("--timing", nargs=4, help=argparse.SUPPRESS)  # model length budget repeats
    args = p.parse_args()
    if args.memory:
        side, model, length, budget = args.memory
        print(json.dumps(memory(side, model, int(length), int(budget))))
        return
    if args.timing:
        model, length, budget, repeats = args.timing
        print(json.dumps(timing(model, int(length), int(budget), int(repeats))))
        return
    from jaxattn.bench.synthetic import random_checkpoint

    def child(*argv) -> dict:
        run = subprocess.run(
            [sys.executable, __file__, *map(str, argv)], capture_output=True, text=True
        )
        if run.returncode:
            print(run.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"{argv[:2]} failed")
        return json.loads(run.stdout.strip().splitlines()[-1])

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model = random_checkpoint(
            "modernbert-base",
            Path(tmp) / "m",
            num_hidden_layers=args.layers,
            hidden_size=args.hidden,
            num_attention_heads=8,
            intermediate_size=2 * args.hidden,
        )
        for side in SIDES:
            rows.append(child("--memory", side, model, args.length, args.budget))
            print(rows[-1], flush=True)
        best = child("--timing", model, args.length, args.budget, args.repeats)
    for r in rows:
        r |= dict(length=args.length, layers=args.layers, budget_mib=args.budget)
        r["best_s"] = best[r["side"]]
    base = rows[0]
    lines = [
        f"{platform.machine()}, T={args.length}, {args.layers} layers, hidden {args.hidden}, "
        f"8 heads, output budget {args.budget} MiB, best of {args.repeats}",
        "",
        "| side | layers a group | program output MiB | best s | time / one "
        "| peak RSS grown MiB | grown / one |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['side']} | {r['group_layers']} | {r['program_output_mib']:.0f} "
            f"| {r['best_s']:.2f} | {r['best_s'] / base['best_s']:.2f}x "
            f"| {r['grown_mib']:.0f} | {r['grown_mib'] / base['grown_mib']:.2f}x |"
        )
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "raw.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (args.out / "table.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
