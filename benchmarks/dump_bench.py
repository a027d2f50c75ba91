"""Dump benchmark (issue 6): examples/s and bytes per example of `jaxattn dump`.

    .venv/bin/python benchmarks/dump_bench.py [--conllu FILE] [-n 512] [--devices 1,2,4]
                                              [--what attention] [--dtype float32] [--repeats 3]

On the first N sentences of a CoNLL-U file, with the embedded model, for each
device count (fake CPU devices via --xla_force_host_platform_device_count, in
a subprocess each, since the flag must be set before jax starts):
  capture: `engine.capture(texts)`: tokenise, capture, Captures in memory;
  dump:    `run_dump` into a fresh store: scan and fingerprint the input and the
           model, tokenise, capture, write zarr v3 through TensorStore, commit.
Both are timed after a warm-up pass (compilation excluded), best of
`repeats`; the overhead is dump / capture - 1. Figures are recorded in
BENCHMARKS.md with the machine and date.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_CONLLU = (
    Path(__file__).resolve().parents[2] / "shared/data/ud-english-ewt/en_ewt-ud-dev.conllu"
)


def first_sentences(conllu: Path, n: int, out: Path) -> Path:
    """Copy the first `n` sentences (blank-line separated blocks) of a CoNLL-U file."""
    blocks, block = [], []
    with open(conllu, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                block.append(line)
            elif block:
                if any(not b.startswith("#") for b in block):
                    blocks.append("".join(block))
                block = []
                if len(blocks) == n:
                    break
    out.write_text("\n".join(blocks) + "\n", encoding="utf-8")
    return out


def worker(args) -> dict:
    """One device count, in this process: capture vs dump."""
    import jax

    import jaxattn
    from jaxattn.checkpoints import default_model_dir
    from jaxattn.dump import DumpOptions, run_dump
    from jaxattn.inputs import read_records

    engine = jaxattn.load()
    texts = [r.text for r in read_records(args.input)]  # what the dump captures
    kw = dict(what=tuple(args.what.split(",")), dtype=args.dtype)
    t = time.perf_counter()
    engine.capture(texts, too_long="truncate", **kw)  # warm-up: compiles every shape once
    compile_s = time.perf_counter() - t
    from jaxattn.dump.fingerprint import checkpoint_fingerprint

    t = time.perf_counter()
    checkpoint_fingerprint(default_model_dir())
    fingerprint_s = time.perf_counter() - t

    # Capture and dump alternate, so a busy machine slows both alike; best of each.
    captures, dumps, results = [], [], []  # (wall, CPU) seconds of each pass
    for _ in range(args.repeats):
        t, c = time.perf_counter(), time.process_time()
        engine.capture(texts, too_long="truncate", **kw)
        captures.append((time.perf_counter() - t, time.process_time() - c))
        with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:  # removed outside the timing
            options = DumpOptions(
                input=args.input, out=f"{tmp}/store.zarr", too_long="truncate", quiet=True, **kw
            )
            with open(os.devnull, "w") as null:
                t, c = time.perf_counter(), time.process_time()
                results.append(
                    run_dump(engine, options, model_dir=default_model_dir(), stream=null)
                )
                dumps.append((time.perf_counter() - t, time.process_time() - c))
    (capture_s, _), (dump_s, _) = min(captures), min(dumps)
    # CPU seconds (every thread of the process) are less sensitive to other users' load.
    capture_cpu, dump_cpu = min(c for _, c in captures), min(c for _, c in dumps)
    counts, stored = results[-1].counts, results[-1].stored
    return {
        "devices": jax.local_device_count(),
        "examples": counts.examples,
        "tokens": counts.tokens,
        "compile_s": round(compile_s, 2),
        "capture_s": round(capture_s, 3),
        "dump_s": round(dump_s, 3),
        "capture_ex_per_s": round(counts.examples / capture_s, 1),
        "dump_ex_per_s": round(counts.examples / dump_s, 1),
        "overhead_pct": round(100 * (dump_s / capture_s - 1), 1),
        "capture_cpu_s": round(capture_cpu, 3),
        "dump_cpu_s": round(dump_cpu, 3),
        "cpu_overhead_pct": round(100 * (dump_cpu / capture_cpu - 1), 1),
        "model_fingerprint_s": round(fingerprint_s, 3),
        "bytes_per_example": round(counts.bytes / counts.examples),
        "stored_bytes_per_example": round(stored / counts.examples),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--conllu", type=Path, default=DEFAULT_CONLLU)
    p.add_argument("-n", type=int, default=512, help="first N sentences")
    p.add_argument("--devices", default="1,2,4", help="comma-separated fake device counts")
    p.add_argument("--what", default="attention")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--input", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--tmp", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        sentences = first_sentences(args.conllu, args.n, Path(tmp) / "input.conllu")
        for devices in (int(d) for d in args.devices.split(",")):
            env = {k: v for k, v in os.environ.items() if not k.startswith("XLA_")}
            env.update(
                JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}"
            )
            cmd = [
                sys.executable,
                __file__,
                "--worker",
                "--input",
                str(sentences),
                "--tmp",
                tmp,
                "--what",
                args.what,
                "--dtype",
                args.dtype,
                "--repeats",
                str(args.repeats),
            ]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if out.returncode:
                sys.stderr.write(out.stderr)
                return out.returncode
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    report = {
        "machine": f"{platform.machine()}, {cpus} CPUs, {platform.system()}",
        "what": args.what,
        "dtype": args.dtype,
        "sentences": args.n,
        "rows": rows,
    }
    print(
        f"{'devices':>7} {'capture ex/s':>12} {'dump ex/s':>10} {'overhead':>9} "
        f"{'CPU overhead':>12} {'bytes/ex':>9} {'stored/ex':>9}"
    )
    for r in rows:
        print(
            f"{r['devices']:>7} {r['capture_ex_per_s']:>12} {r['dump_ex_per_s']:>10} "
            f"{r['overhead_pct']:>8}% {r['cpu_overhead_pct']:>11}% {r['bytes_per_example']:>9} "
            f"{r['stored_bytes_per_example']:>9}"
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
