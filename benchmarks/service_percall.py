"""Per-request CPU of the server (issue 32): 32 clients, one short sentence each, profiled.

    .venv/bin/python benchmarks/service_percall.py [--model PATH] [--seconds S]
        [--yappi DIR] [--weights-header-ab N] [--out FILE]

The concurrency part of `service_scale.py`, measured in CPU seconds: 32 threads,
each with its own `AttentionClient`, send one EWT sentence of 6-10 words per
request (attention, float32) to a micro-batching server in a child process
(its own GIL) for `--seconds`; the report gives requests/s, the server's and
the client's CPU ms per request (/proc and `time.process_time`), and the
engine's own rate on the same 256 sentences in one call, measured in this
process just before and just after (the ratio the issue asks for).

`--yappi DIR` (yappi importable, e.g. `pip install --target DIR yappi`: a
profiler, not a project dependency) runs the server under yappi's CPU clock,
every thread, and prints its top functions by own time and by inclusive time.
The profiler costs the server CPU of its own: compare CPU ms per request
between runs with the profiler, or between runs without it, not across.

`--weights-header-ab N` measures, against the same server, the clients asking
for the weights fingerprint in the first header (CaptureRequest.weights_in_header,
the client's default: no initial-metadata send of its own on the server) and not
(as a client that predates the field), N runs of each, interleaved (on/off,
off/on, ...), and reports every run, the least server CPU ms per request of
each (the other jobs of a shared machine only ever add to a run's CPU), the
median of each and the median of the rounds' differences (on minus off, the two
runs of a round side by side).
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import service_bench as sb  # noqa: E402 (scripts beside this one)
import service_scale as ss  # noqa: E402


def child(args) -> int:
    import logging

    import jaxattn
    from service.server import create_server

    logging.basicConfig(level=logging.WARNING)
    engine = jaxattn.load(args.model)
    ss.warm(engine, Path(args.warm).read_text().splitlines())
    server, port = create_server(engine, "127.0.0.1:0", max_tokens=1 << 20, queue_size=128)
    server.start()
    profile = args.profile_out
    if profile:
        sys.path.insert(0, args.yappi)
        import yappi

        yappi.set_clock_type("cpu")
        signal.signal(signal.SIGUSR1, lambda *_: yappi.start(builtins=True, profile_threads=True))
        signal.signal(signal.SIGUSR2, lambda *_: (yappi.stop(), _dump(yappi, profile)))
    return sb.serve_until_sigterm(server, port)


def _dump(yappi, out: str, n: int = 25) -> None:
    stats = yappi.get_func_stats()
    total = sum(s.tsub for s in stats) or 1.0
    rows = [f"yappi, CPU clock, every thread: {total:.2f} CPU s in all"]
    for key, title in (("tsub", "own time"), ("ttot", "inclusive time")):
        rows.append(f"by {title}:")
        for s in sorted(stats, key=lambda s: getattr(s, key), reverse=True)[:n]:
            where = "/".join(Path(s.module).parts[-2:])
            rows.append(
                f"  {getattr(s, key) / total:6.1%}  {getattr(s, key):7.2f} s  "
                f"{s.ncall:>8}  {s.name} ({where}:{s.lineno})"
            )
    Path(out).write_text("\n".join(rows) + "\n")


def weights_header_ab(
    address: str, pid: int, short, seconds: float, repeats: int, clients: int = 32
) -> list[str]:
    """Report lines of `repeats` interleaved runs of `clients` clients with and without
    CaptureRequest.weights_in_header against the server `pid` at `address`."""
    runs: dict[bool, list[dict]] = {True: [], False: []}
    lines = [
        f"weights in the header (on) or in the initial metadata (off), {repeats} runs "
        f"each, interleaved, {seconds:g} s each, {clients} clients, one sentence each:"
    ]
    for r in range(repeats):
        for on in (True, False) if r % 2 == 0 else (False, True):
            cpu: dict = {}
            load = os.getloadavg()[0]
            with ss.cpu_time(cpu, pid):
                rate, latency = sb.concurrent(
                    address, short, clients=clients, seconds=seconds, weights_in_header=on
                )
            n = rate * seconds
            run = dict(
                server=cpu["server_cpu_s"] / n * 1e3,
                client=cpu["client_cpu_s"] / n * 1e3,
                rate=rate,
                latency=latency,
                load=load,
            )
            runs[on].append(run)
            lines.append(
                f"  run {r + 1} {'on ' if on else 'off'}: server {run['server']:.3f} CPU ms "
                f"per request, client {run['client']:.3f}; {rate:.0f} requests/s, mean "
                f"latency {latency * 1e3:.0f} ms; load average {load:.1f} at start"
            )
    server = {on: [r["server"] for r in runs[on]] for on in runs}
    least = {on: min(v) for on, v in server.items()}
    median = {on: statistics.median(v) for on, v in server.items()}
    diff = statistics.median(a - b for a, b in zip(server[True], server[False], strict=True))
    lines.append(
        f"server CPU ms per request, least: on {least[True]:.3f}, off {least[False]:.3f} "
        f"(on/off {least[True] / least[False]:.3f}); median: {median[True]:.3f} and "
        f"{median[False]:.3f} ({median[True] / median[False]:.3f}); median of the rounds' "
        f"differences {diff * 1e3:+.0f} us; least client CPU ms per request: on "
        f"{min(r['client'] for r in runs[True]):.3f}, off "
        f"{min(r['client'] for r in runs[False]):.3f}"
    )
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="checkpoint (default: embedded all-MiniLM-L6-v2)")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--yappi", help="a directory holding yappi: profile the server")
    p.add_argument(
        "--weights-header-ab",
        type=int,
        metavar="N",
        help="N interleaved runs with and without CaptureRequest.weights_in_header",
    )
    p.add_argument(
        "--ab-clients",
        type=int,
        default=32,
        metavar="C",
        help="clients of the --weights-header-ab runs (default 32; 1: every batch one request)",
    )
    p.add_argument("--out", type=Path, help="also write the report here")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--warm", help=argparse.SUPPRESS)
    p.add_argument("--profile-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    import jaxattn

    short = [s for s in sb.sentences(sb.CONLLU) if 6 <= len(s.split()) <= 10][:256]
    tmp = Path(tempfile.mkdtemp())
    warm_file = tmp / "short.txt"
    warm_file.write_text("\n".join(short))
    lines = [
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f} at start; python {platform.python_version()}; model "
        f"{args.model or 'all-MiniLM-L6-v2'}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    ]
    engine = jaxattn.load(args.model)
    ss.warm(engine, short)
    what = ("attention",)
    before = [ss.engine_capture(engine, short, what) for _ in range(3)]
    cmd = [sys.executable, __file__, "--child", "--warm", str(warm_file)]
    cmd += ["--model", args.model] if args.model else []
    profile = tmp / "yappi.txt"
    cmd += ["--yappi", args.yappi, "--profile-out", str(profile)] if args.yappi else []
    env = dict(
        os.environ,
        JAXATTN_COMPILATION_CACHE=str(Path(tempfile.gettempdir()) / "jaxattn-bench-cache"),
    )
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    try:
        address = f"127.0.0.1:{int(proc.stdout.readline())}"
        sb.concurrent(address, short, seconds=2)  # connect, settle
        if args.weights_header_ab:
            ab = weights_header_ab(
                address, proc.pid, short, args.seconds, args.weights_header_ab, args.ab_clients
            )
        if args.yappi:
            os.kill(proc.pid, signal.SIGUSR1)
        cpu: dict = {}
        with ss.cpu_time(cpu, proc.pid):
            rate, latency = sb.concurrent(address, short, seconds=args.seconds)
        if args.yappi:
            os.kill(proc.pid, signal.SIGUSR2)
            while not profile.exists() or not profile.stat().st_size:
                time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    after = ss.engine_capture(engine, short, what)
    ceiling = max(c["n"] / c["seconds"] for c in before)
    n = rate * args.seconds
    lines.append(
        f"32 clients, one sentence each, attention float32, {args.seconds:g} s: "
        f"{rate:.0f} requests/s (mean latency {latency * 1e3:.0f} ms); engine one call "
        f"{ceiling:.0f}/s (best of 3 before), {after['n'] / after['seconds']:.0f}/s after: "
        f"{rate / ceiling:.0%}; CPU ms per request: server "
        f"{cpu['server_cpu_s'] / n * 1e3:.2f}, client {cpu['client_cpu_s'] / n * 1e3:.2f}"
        f"{' (server under yappi)' if args.yappi else ''}; engine alone "
        f"{1e3 / ceiling:.2f} ms of wall per sentence; load average at end "
        f"{os.getloadavg()[0]:.1f}"
    )
    if args.yappi:
        lines.append(profile.read_text())
    if args.weights_header_ab:
        lines += ab
    print("\n".join(lines), flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
