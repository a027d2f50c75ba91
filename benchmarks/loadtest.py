"""Load test of the service (issue 7): `jaxattn serve` under many, slow and departing clients.

    .venv/bin/python benchmarks/loadtest.py [--requests 10000] [--clients 64] [--json FILE]

Starts `jaxattn serve` (embedded all-MiniLM-L6-v2, default options) as a child
process on a free loopback port, then:
  1. load: `jaxattn loadtest`'s mix (jaxattn/bench/mix.py) from 64 client
     threads for --requests requests, every answer checked against an in-process
     engine; requests/s, p50/p99 latency, errors by status code, server RSS
     (/proc/PID/status VmRSS, every second) over the run;
  2. slow readers: 4 clients each ask for 24 long (~500-token) texts, full
     float32 attention (1.7 GiB each if the server buffered it), and read one
     message every 0.25 s through a 64 KiB HTTP/2 window, while a fifth client
     sends single sentences; server RSS and the fifth client's latency;
  3. SIGTERM under load: 64 clients, SIGTERM after 5 s; what the in-flight and
     the late calls got, the exit status and how long the drain took.
Prints a markdown report (RELIABILITY.md, BENCHMARKS.md) and the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JAXATTN = Path(sys.executable).with_name("jaxattn")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def start_server(workdir: Path, *options: str) -> tuple[subprocess.Popen, str, Path]:
    """`jaxattn serve --port 0 OPTIONS` in `workdir`: (process, address, log) once listening."""
    err = workdir / "serve.log"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(err, "wb") as f:
        proc = subprocess.Popen(
            [str(JAXATTN), "serve", "--port", "0", *options],
            stdout=subprocess.PIPE,
            stderr=f,
            text=True,
            env=env,
            cwd=workdir,
        )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    line = lines.get(timeout=300)
    address = "127.0.0.1:" + line.split("listening on 127.0.0.1:")[1].split()[0]
    return proc, address, err


def rss_trend(rss: list[tuple[float, int, int]]) -> float:
    """Least-squares slope of RSS (MiB) per 1000 requests over the second half of the run."""
    half = rss[len(rss) // 2 :]
    if len(half) < 3 or half[-1][2] == half[0][2]:
        return float("nan")
    xs, ys = [n / 1000 for _, _, n in half], [kb / 1024 for _, kb, _ in half]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def slow_readers(address: str, pid: int, longs: list[str], seconds: float = 40.0) -> dict:
    import grpc

    from jaxattn.bench.load_generator import rss_kb
    from jaxattn.client import AttentionClient
    from jaxattn.v1 import attention_pb2 as pb

    request = pb.CaptureRequest(
        texts=[pb.Text(text=longs[i % len(longs)]) for i in range(24)], what=["attention"]
    ).SerializeToString()
    window = [
        ("grpc.http2.lookahead_bytes", 65536),
        ("grpc.http2.bdp_probe", 0),
        ("grpc.max_receive_message_length", 8 << 20),
    ]
    stop, got, errors = threading.Event(), [0] * 4, []

    def slow(k: int) -> None:
        with grpc.insecure_channel(address, window) as channel:
            call = channel.unary_stream(
                "/jaxattn.v1.AttentionService/Capture",
                request_serializer=None,
                response_deserializer=None,
            )(request, timeout=seconds + 60)
            try:
                for _ in call:
                    got[k] += 1
                    if stop.wait(0.25):
                        break
            except grpc.RpcError as e:
                errors.append(e.code().name)
            call.cancel()

    start_kb = rss_kb(pid)
    threads = [threading.Thread(target=slow, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    samples, latencies = [], []
    end = time.monotonic() + seconds
    with AttentionClient(address, timeout=120) as fast:
        while time.monotonic() < end:
            t0 = time.monotonic()
            fast.capture(["I went to the store."])
            latencies.append(time.monotonic() - t0)
            samples.append(rss_kb(pid))
            time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join(60)
    time.sleep(2)
    return {
        "seconds": seconds,
        "messages_read_per_slow_client": got,
        "slow_client_errors": errors,
        "rss_mib": {
            "before": start_kb // 1024,
            "max": max(samples) // 1024,
            "after": rss_kb(pid) // 1024,
        },
        "unbuffered_would_hold_gib": round(4 * 24 * 6 * 12 * 500**2 * 4 / 2**30, 1),
        "fast_client_ms": {
            "n": len(latencies),
            "p50": round(statistics.median(latencies) * 1e3, 1),
            "max": round(max(latencies) * 1e3, 1),
        },
    }


def sigterm_under_load(proc, address, mix, expectations, clients: int) -> dict:
    from jaxattn.bench.load_generator import run_load

    out = {}

    def terminate() -> None:
        time.sleep(5)
        out["sigterm_at"] = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out["exit_status"] = proc.wait(120)
        out["drain_s"] = round(time.monotonic() - out["sigterm_at"], 2)

    killer = threading.Thread(target=terminate)
    killer.start()
    result = run_load(
        address, mix, expectations, clients=clients, duration=15, client_options=dict(timeout=120)
    )
    killer.join()
    s = result.summary()
    out.update({k: s[k] for k in ("requests", "ok", "wrong", "lost", "errors")})
    out.pop("sigterm_at")
    return out


def report(load: dict, trend: float, slow: dict, term: dict, load_avg: str, clients: int) -> str:
    rss = load["rss_mib"]
    kinds = ", ".join(
        f"{k} {v['n']} (p50 {v['p50_ms']} ms, p99 {v['p99_ms']} ms)"
        for k, v in load["by_kind"].items()
    )
    return f"""
**Load** ({load["requests"]} requests, 64 clients, load average before the run {load_avg}):
{load["ok"]} right answers, **{load["wrong"]} wrong, {load["lost"]} lost**, errors by code
{load["errors"] or "none"}; **{load["requests_per_s"]} requests/s**, latency **p50
{load["p50_ms"]} ms, p99 {load["p99_ms"]} ms** ({load["examples"]} examples in
{load["elapsed_s"]} s). By kind: {kinds}. Server RSS: start {rss["start"]} MiB, max
{rss["max"]} MiB, end {rss["end"]} MiB; trend over the second half {trend:+.1f} MiB per 1000
requests.

**Slow readers** ({slow["seconds"]:.0f} s; 4 clients reading one message per 0.25 s, each
asking for 24 long texts' float32 attention: {slow["unbuffered_would_hold_gib"]} GiB for all
four if the server buffered it): server RSS {slow["rss_mib"]["before"]} MiB before, max
{slow["rss_mib"]["max"]} MiB, {slow["rss_mib"]["after"]} MiB after; messages read per slow
client {slow["messages_read_per_slow_client"]}; a fifth client's single sentences meanwhile:
p50 {slow["fast_client_ms"]["p50"]} ms, max {slow["fast_client_ms"]["max"]} ms
({slow["fast_client_ms"]["n"]} requests).

**SIGTERM under load** ({clients} clients, SIGTERM after 5 s, default client retries, no
restart):
{term["ok"]} right answers, {term["wrong"]} wrong, {term["lost"]} lost, errors {term["errors"]};
exit status {term["exit_status"]}, drained in {term["drain_s"]} s.
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/jaxattn-loadtest"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from jaxattn.bench.mix import loadtest

    args.workdir.mkdir(parents=True, exist_ok=True)
    # The reference engine here and the server share compiled programs.
    os.environ["JAXATTN_COMPILATION_CACHE"] = str(args.workdir / "jit-cache")
    load_avg = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    proc, address, serve_log = start_server(args.workdir)
    log(f"server {proc.pid} on {address}")
    try:
        result, mix, expectations = loadtest(
            address,
            clients=args.clients,
            requests=args.requests,
            duration=1800,
            server_pid=proc.pid,
            log=log,
        )
        load = result.summary()
        trend = rss_trend(result.rss)
        log(f"load: {json.dumps(load)}")
        longs = sorted({r.texts[0] for r in mix if r.kind == "long"})
        slow = slow_readers(address, proc.pid, longs)
        log(f"slow readers: {slow}")
        small = [i for i, r in enumerate(mix) if r.kind in ("single", "pair", "batch50")]
        term = sigterm_under_load(
            proc, address, [mix[i] for i in small], [expectations[i] for i in small], args.clients
        )
        log(f"sigterm: {term}")
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = serve_log.read_text().splitlines()
    statuses = {}
    for line in lines:
        if " Capture peer=" in line:
            code = line.split("status=")[1].split()[0]
            statuses[code] = statuses.get(code, 0) + 1
    print(report(load, trend, slow, term, load_avg, args.clients))
    print(f"Server log: {len(lines)} lines; Capture calls by status: {statuses}")
    if args.json:
        figures = dict(
            load=load,
            rss_trend_mib_per_1000=trend,
            slow_readers=slow,
            sigterm=term,
            server_statuses=statuses,
            load_average=load_avg,
            rss_samples=result.rss,
        )
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if not load["wrong"] and not load["lost"] else 1


if __name__ == "__main__":
    sys.exit(main())
