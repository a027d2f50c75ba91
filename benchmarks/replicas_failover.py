"""Service at scale (issue 32): 3 replicas, one SIGKILLed mid-run under 32 concurrent clients.

    .venv/bin/python benchmarks/replicas_failover.py [--requests 2000] [--clients 32]
        [--kill-after 20] [--workdir DIR] [--json FILE]

Starts three `jaxattn serve` processes (the embedded all-MiniLM-L6-v2, default
options but `--max-batch 8`, one shared compilation cache) on free loopback
ports; computes the right answers in-process (`jaxattn.bench.expect`: float32,
bit for bit at one of the batch sizes the servers may run); then sends
`--requests` requests from `--clients` threads, each its own `AttentionClient`
of the three addresses (round-robin, health-aware, resuming cut streams): single
sentences and streams of 16 (attention, float32), and SIGKILLs replica
0 `--kill-after` seconds into the run. Every request sent is counted once:
answered right, wrong, refused (by status code) or lost (no answer and no
status). Prints a markdown table for BENCHMARKS.md ("Service at scale (issue
32)") and the figures as JSON. docs/replicas.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

JAXATTN = Path(sys.executable).with_name("jaxattn")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def start_replica(workdir: Path) -> tuple[subprocess.Popen, str]:
    """A replica (`jaxattn serve --max-batch 8`): (process, address) once it listens."""
    from loadtest import start_server  # benchmarks/loadtest.py, beside this script

    workdir.mkdir(parents=True, exist_ok=True)
    proc, address, _ = start_server(workdir, "--max-batch", "8")
    return proc, address


def partial_requests(serve_log: Path) -> int:
    """Calls a replica logged with 2..15 texts (its log has one line per call)."""
    with open(serve_log) as f:
        return sum(any(f" texts={n} " in line for n in range(2, 16)) for line in f)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(x.split(":", 1)[1].strip() for x in f if x.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--kill-after", type=float, default=20.0, help="seconds into the run")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    import jaxattn
    from jaxattn.bench.expect import ENGINE_MAX_BATCH, build_expectations
    from jaxattn.bench.load_generator import LoadRequest, run_load
    from jaxattn.bench.mix import sentences
    from jaxattn.bench.sentences import DEFAULT_CONLLU
    from jaxattn.client import AttentionClient

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="jaxattn-replicas-"))

    def log_path(i: int) -> Path:
        return workdir / f"replica{i}" / "serve.log"

    cache = workdir / "xla"
    os.environ["JAXATTN_COMPILATION_CACHE"] = str(cache)  # the replicas' and the engine's
    log(f"starting 3 replicas in {workdir}")
    with ThreadPoolExecutor(3) as pool:
        starting = [pool.submit(start_replica, workdir / f"replica{i}") for i in range(3)]
        engine = jaxattn.load()
        pool_sentences = sentences(engine, DEFAULT_CONLLU)[:72]
        # A quarter of the requests are streams of 16 texts, which the replicas run 8 at
        # a time (--max-batch 8) among the others: a kill cuts some of them part-way.
        mix = [LoadRequest("single", (s,)) for s in pool_sentences[:24]] + [
            LoadRequest("stream16", tuple(pool_sentences[8 * k : 8 * k + 16])) for k in range(8)
        ]
        log(f"mix: {len(mix)} kinds; computing the right answers in-process")
        expectations = build_expectations(engine, mix, max_batch=min(8, ENGINE_MAX_BATCH))
        replicas = [f.result() for f in starting]
    addresses = [a for _, a in replicas]
    log(f"replicas at {', '.join(addresses)}; compiling their shapes")
    for address in addresses:  # each replica compiles its batch shapes before the run
        with AttentionClient(address, timeout=600) as one:
            for size in (1, 2, 4, 8):
                one.capture(list(pool_sentences[:size]), what=("attention",))

    victim = replicas[0][0]
    killed_at: list[float] = []

    def kill() -> None:
        victim.kill()  # SIGKILL: no drain; its connections reset mid-stream
        killed_at.append(time.monotonic())
        log(f"SIGKILLed replica 0 ({addresses[0]}, pid {victim.pid})")

    killer = threading.Timer(args.kill_after, kill)
    log(f"load: {args.requests} requests from {args.clients} clients")
    start = time.monotonic()
    killer.start()
    try:
        result = run_load(
            addresses,
            mix,
            expectations,
            clients=args.clients,
            max_requests=args.requests,
            server_pid=replicas[1][0].pid,
            rss_every_s=0.25,
            client_options=dict(timeout=120.0),
        )
    finally:
        killer.cancel()
        for proc, _ in replicas:
            if proc.poll() is None:
                proc.terminate()
        for proc, _ in replicas:
            proc.wait(60)
    done_at_kill = None
    if killed_at:
        at = killed_at[0] - start
        done_at_kill = max((n for t, _, n in result.rss if t <= at), default=0)
    # A resumed stream reaches a surviving replica as a request of 2..15 texts; the
    # warm-up sent one of 2, 4 and 8 texts to each.
    resumed = sum(partial_requests(log_path(i)) for i in (1, 2)) - 2 * 3
    figures = {
        "machine": f"{os.cpu_count()} CPUs, {cpu_model()}",
        "date": time.strftime("%Y-%m-%d"),
        "replicas": 3,
        "clients": args.clients,
        "killed_after_s": round(killed_at[0] - start, 1) if killed_at else None,
        "answered_before_kill": done_at_kill,
        "victim_exit": victim.returncode,
        "streams_resumed_on_survivors": resumed,
        **result.summary(),
    }
    figures.pop("rss_mib", None)
    print(
        "| replicas | clients | sent | answered right | wrong | refused | lost | killed |\n"
        "|---|---|---|---|---|---|---|---|\n"
        f"| 3 | {args.clients} | {figures['requests']} | {figures['ok']} | {figures['wrong']} "
        f"| {sum(figures['errors'].values())} {dict(figures['errors']) or ''} "
        f"| {figures['lost']} | replica 0 by SIGKILL at {figures['killed_after_s']} s, "
        f"after {done_at_kill} answers; {resumed} cut streams resumed |"
    )
    print(json.dumps(figures, indent=1))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0 if figures["ok"] == figures["requests"] else 1


if __name__ == "__main__":
    sys.exit(main())
