"""Large host copies into fresh memory (issues 30/31): one thread against `jaxattn.capture.bulk`.

    python benchmarks/host_copy.py copy --gib 1 --rounds 8             # np.copyto vs bulk
    python benchmarks/host_copy.py copy --gib 1 --rounds 6 --strided   # a trimmed row's view
    python benchmarks/host_copy.py assemble --rounds 8   # a grouped capture (Assembler.add)
    python benchmarks/host_copy.py copied --rounds 8     # results copied out (host.copied)

`copy`: GB/s of copying a float32 array of --gib GiB into a fresh `np.empty` (each
round a new one), by one `np.copyto` and by `bulk.copy_into`, interleaved, and once
into memory already touched; `--strided` copies a view [L, 8, 2048, 2048] of a
[L, 8, 2304, 2304] block, as a capture's trimmed rows are.

`assemble` and `copied`: a random ModernBERT-shaped model (hidden 64, 8 heads,
--layers layers), `attention` of every head, captured with the copies on one
thread (`bulk.POOL_MIN` past any array) and on the pool (the default), interleaved
in one process after a first capture (compiles); each round's wall time and the
time in the copy (`Assembler.add`, `host.copied`). `assemble`: one text of --length
tokens under a 64 MiB output budget, so one layer a group; `copied`: --texts texts
on the CPU's pinned host memory with a pinned budget of one byte, so every batch's
Captures are copied out. Each capture's bytes are checked against the first's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path


def copy(gib: float, rounds: int, strided: bool) -> None:
    import numpy as np

    from jaxattn.capture import bulk

    n = int(gib * (1 << 30))
    if strided:
        layers = max(1, n // (8 * 2048 * 2048 * 4))
        src = np.ones((layers, 8, 2304, 2304), np.float32)[:, :, :2048, :2048]
    else:
        src = np.ones(n // 4, np.float32)
    kind = "strided" if strided else "contiguous"
    print(f"{src.nbytes / 2**30:.2f} GiB {kind}, {bulk.pool()[1]} pool threads")
    rates: dict[str, list[float]] = {"one": [], "pool": []}
    for r in range(rounds):
        for side in rates:
            dst = np.empty(src.shape, src.dtype)
            t0 = time.perf_counter()
            (np.copyto if side == "one" else bulk.copy_into)(dst, src)
            rates[side].append(src.nbytes / (time.perf_counter() - t0) / 1e9)
            print(f"  round {r} {side}: {rates[side][-1]:.2f} GB/s", flush=True)
    t0 = time.perf_counter()
    np.copyto(dst, src)
    touched = src.nbytes / (time.perf_counter() - t0) / 1e9
    for side, got in rates.items():
        print(f"{side}: best {max(got):.2f} GB/s, median {statistics.median(got):.2f}")
    print(f"into touched memory (one thread): {touched:.2f} GB/s; load {os.getloadavg()}")


def engine_side(mode: str, args) -> None:
    import jaxattn
    from jaxattn.bench.capture import synthetic_texts
    from jaxattn.bench.synthetic import random_checkpoint
    from jaxattn.capture import bulk, part
    from jaxattn.engine import host

    with tempfile.TemporaryDirectory() as tmp:
        model = random_checkpoint(
            "modernbert-base",
            Path(tmp) / "m",
            num_hidden_layers=args.layers,
            hidden_size=64,
            num_attention_heads=8,
            intermediate_size=128,
        )
        if mode == "assemble":
            engine = jaxattn.load(model, buckets=(args.length,), output_budget=64 << 20)
            texts = synthetic_texts(args.length, 1)
        else:
            engine = jaxattn.load(
                model, buckets=(args.length,), host_memory="pinned", output_budget=4 << 30
            )
            engine.pipeline.pinned_budget = 1  # every batch's Captures copied out
            texts = synthetic_texts(args.length, args.texts)
    # The copy's own time: the function the capture calls, timed where it is looked up.
    owner, name = (part.Assembler, "add") if mode == "assemble" else (host, "copied")
    inner, spent = getattr(owner, name), [0.0]

    def timed(*a):
        t0 = time.perf_counter()
        try:
            return inner(*a)
        finally:
            spent[0] += time.perf_counter() - t0

    setattr(owner, name, timed)
    want = [c.attention.tobytes() for c in engine.capture(texts, what="attention")]
    nbytes = sum(map(len, want))
    print(f"{mode}: {nbytes / 2**20:.0f} MiB copied a capture, {args.length} tokens")
    real = bulk.POOL_MIN
    runs: dict[str, list[tuple[float, float]]] = {"one thread": [], "pool": []}
    for r in range(args.rounds):
        for side in runs:
            bulk.POOL_MIN = 1 << 62 if side == "one thread" else real
            spent[0] = 0.0
            t0 = time.perf_counter()
            caps = engine.capture(texts, what="attention")
            wall = time.perf_counter() - t0
            assert [c.attention.tobytes() for c in caps] == want
            del caps
            runs[side].append((wall, spent[0]))
            print(f"  round {r} {side}: {wall:.3f} s, {name} {spent[0]:.3f} s", flush=True)
    bulk.POOL_MIN = real
    for side, got in runs.items():
        walls, copies = [w for w, _ in got], [c for _, c in got]
        print(
            f"{side}: capture best {min(walls):.3f} s, median {statistics.median(walls):.3f}; "
            f"{name} best {min(copies):.3f} s ({nbytes / min(copies) / 1e9:.2f} GB/s), "
            f"median {statistics.median(copies):.3f}"
        )
    print(f"load {os.getloadavg()}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=("copy", "assemble", "copied"))
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--strided", action="store_true")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--length", type=int, default=None, help="2,048 (assemble), 1,024 (copied)")
    p.add_argument("--texts", type=int, default=4)
    args = p.parse_args()
    if args.mode == "copy":
        copy(args.gib, args.rounds, args.strided)
        return
    if args.length is None:
        args.length = 2048 if args.mode == "assemble" else 1024
    engine_side(args.mode, args)


if __name__ == "__main__":
    main()
