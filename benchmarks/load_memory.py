"""Host memory at load: `jaxattn.load` of a random Llama-3.2-1B-shaped checkpoint.

    python benchmarks/load_memory.py --model-dir /tmp/llama-1b --out benchmarks/results/DATE-load
    python benchmarks/load_memory.py --layers 2 --model-dir /tmp/llama-1b-2   # quicker
    python benchmarks/load_memory.py --tiny                  # a check of the script

The checkpoint is `jaxattn.bench.synthetic.random_checkpoint("llama-1b", ...)` (16 layers,
hidden 2048, vocab 30,522, float32 weights: 1,035,655,168 parameters = 4.14 GB;
`--layers N` keeps N of the layers), written once into --model-dir and reused from there.
Each layer loop (`layer_loop=` "scan" and "unrolled") loads in a fresh child process,
one after the other (never two at once), which reports, in MiB:

- weights: the params' bytes (every tensor of the loaded checkpoint);
- before: the process's RSS before `jaxattn.load` (jax, transformers and the engine
  imported, the backend started);
- load_peak: its peak RSS during the load (VmHWM, restarted before through
  /proc/self/clear_refs), and the peak of each phase that can be told apart, each
  restarted at the phase's start: read (the weight files into numpy), build (the
  checkpoint's tensors into the params tree), place (the params onto the devices:
  stacking the weight sets for "scan" included), tokenizer;
- loaded: its RSS once `load` returned;
- fingerprinted and fingerprint_peak: its RSS and peak (restarted when `load` returned)
  once `Engine.weights_fingerprint` is made (the fingerprint is made in a thread of its
  own from the engine's making on: this waits for it);
- the seconds of each phase, of `load` as a whole and of the wait for the fingerprint.

The phases are found by wrapping the loader's functions (`hf_files.read_state_dict`,
`hf_files.convert_state_dict`, `step.CaptureStep.__init__`, `loading.read_tokenizer`);
a phase a version of jaxattn does not have is left out. `loaded` is read as `load`
returns, the fingerprint's thread perhaps still at work.

On a CPU-only machine the devices' memory IS host memory: the placed weights are ~1x
the weights of RSS by themselves, so the floor after load is ~1x the weights plus the
runtime's baseline (`before`, and ~0.3 GB that any load adds: the tiny model's
figures), and placing, with the params still on the host, holds ~2x; on a GPU the
placed weights live on the card and the floor is the baseline. A figure over that
floor is a host copy someone holds.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from long_context import kib, reset_peak  # the RSS figures, read as there

LOOPS = ("scan", "unrolled")
TINY = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2)
TINY |= dict(head_dim=16, intermediate_size=96)


def mib(k: int) -> float:
    return round(k / 1024, 1)


class Phases:
    """The peak RSS and seconds of each wrapped phase; the peak restarted at each edge, so
    the largest segment's peak is the whole's."""

    def __init__(self):
        self.rows: dict[str, dict] = {}
        self.segment_peaks: list[int] = []

    def edge(self) -> None:
        self.segment_peaks.append(kib("VmHWM"))
        reset_peak()

    def wrap(self, module, name: str, phase: str) -> None:
        fn = getattr(module, name, None)
        if fn is None:
            return

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            self.edge()
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds = time.perf_counter() - t
                peak = kib("VmHWM")
                self.edge()
                row = self.rows.setdefault(phase, dict(s=0.0, peak=0))
                row["s"] = round(row["s"] + seconds, 3)
                row["peak"] = max(row["peak"], peak)

        setattr(module, name, timed)


def one(job: dict) -> dict:
    """One load in this (fresh) process: the figures of the module docstring."""
    import jax
    import transformers  # noqa: F401  (the tokenizer's, imported by the load: baseline)

    import jaxattn
    from jaxattn.checkpoints import hf_files, loading
    from jaxattn.engine import step

    jax.devices()  # the backend started: part of the baseline
    phases = Phases()
    phases.wrap(hf_files, "read_state_dict", "read")
    phases.wrap(hf_files, "convert_state_dict", "build")
    phases.wrap(step.CaptureStep, "__init__", "place")
    phases.wrap(loading, "read_tokenizer", "tokenizer")
    before = kib("VmRSS")
    reset_peak()
    t = time.perf_counter()
    engine = jaxattn.load(job["model"], layer_loop=job["loop"], compilation_cache_dir=False)
    load_s = time.perf_counter() - t
    phases.edge()
    loaded = kib("VmRSS")
    t = time.perf_counter()
    weights = engine.weights_fingerprint
    wait_s = time.perf_counter() - t
    row = dict(loop=job["loop"], device=jax.devices()[0].platform, jax=jax.__version__)
    row |= dict(
        weights_mib=mib(sum(x.nbytes for x in jax.tree.leaves(engine.step.params)) >> 10),
        before_mib=mib(before),
        load_peak_mib=mib(max(phases.segment_peaks)),
        loaded_mib=mib(loaded),
        fingerprinted_mib=mib(kib("VmRSS")),
        fingerprint_peak_mib=mib(kib("VmHWM")),
        load_s=round(load_s, 2),
        fingerprint_wait_s=round(wait_s, 2),
        fingerprint=weights,
    )
    for phase, r in phases.rows.items():
        row |= {f"{phase}_s": r["s"], f"{phase}_peak_mib": mib(r["peak"])}
    return row


def run_one(job: dict) -> dict:
    cmd = [sys.executable, __file__, "--one", json.dumps(job)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        lines = p.stderr.strip().splitlines() or [f"exit {p.returncode}"]
        return dict(loop=job["loop"], error=lines[-1])
    return json.loads(p.stdout.strip().splitlines()[-1])


COLUMNS = (
    "loop",
    "weights_mib",
    "before_mib",
    "load_peak_mib",
    "loaded_mib",
    "fingerprint_peak_mib",
    "fingerprinted_mib",
    "read_peak_mib",
    "build_peak_mib",
    "place_peak_mib",
    "load_s",
    "read_s",
    "build_s",
    "place_s",
    "tokenizer_s",
    "fingerprint_wait_s",
)


def table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['loop']} | error: {r['error']} |")
        else:
            lines.append("| " + " | ".join(str(r.get(c, "")) for c in COLUMNS) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--one", metavar="JOB", help=argparse.SUPPRESS)  # a child: JSON
    p.add_argument("--layers", type=int, help="the model's layers (default: 16, the full one)")
    p.add_argument("--tiny", action="store_true", help="a tiny model of the same family")
    p.add_argument("--loops", default=",".join(LOOPS), help="the layer loops, in order")
    p.add_argument(
        "--model-dir",
        type=Path,
        help="keep the random checkpoint here and reuse it when there (default: a temp dir)",
    )
    p.add_argument("--out", type=Path, help="write raw.jsonl and table.md here")
    args = p.parse_args()
    if args.one:
        print(json.dumps(one(json.loads(args.one))))
        return
    from jaxattn.bench.synthetic import random_checkpoint

    overrides = dict(TINY) if args.tiny else {}
    if args.layers:
        overrides["num_hidden_layers"] = args.layers
    with tempfile.TemporaryDirectory() as tmp:
        where = args.model_dir or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        if not (where / "config.json").exists():  # else written by an earlier run
            random_checkpoint("llama-1b", where, **overrides)
        rows = [run_one(dict(model=str(where), loop=loop)) for loop in args.loops.split(",")]
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        with open(args.out / "raw.jsonl", "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        (args.out / "table.md").write_text(table(rows) + "\n")
    print(table(rows))
    print(f"cpus {os.cpu_count()}")


if __name__ == "__main__":
    main()
