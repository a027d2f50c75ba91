"""What an explicit initial-metadata send costs a grpc-python server per call (issue 32).

    .venv/bin/python benchmarks/grpc_initial_metadata.py [--clients C] [--calls N]
        [--repeats R]

Bare gRPC, no jaxattn: a server in a child process (its own GIL) answers a
unary-stream call with two small messages (a header's and a chunk's size, as a
short sentence's capture), either as the servicer answers a request with
CaptureRequest.weights_in_header (no metadata of its own: gRPC sends its empty
headers with the first message) or as it answers one without
(`context.send_initial_metadata` with a jaxattn-weights entry first, a gRPC
operation of its own). `C` client threads, each with its own channel, make N
calls each per run; runs alternate (header/metadata, metadata/header, ...), R
of each; the report gives the server's CPU microseconds per call (/proc) of every
run, the least and the median of each kind (other jobs of a shared machine only
add to a run), and the median of the rounds' differences (header minus metadata,
the two runs of a round side by side, so that slow drifts of the machine cancel).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from concurrent import futures
from pathlib import Path

METHOD = "/bare.Bare/Capture"
WEIGHTS = ("jaxattn-weights", "blake2b:" + "0" * 64)
HEADER, METADATA = b"h", b"m"  # the request: how the server names the weights


def child() -> int:
    import grpc

    def capture(request: bytes, context):
        if request == METADATA:
            context.send_initial_metadata((WEIGHTS,))
        yield bytes(120)  # an ExampleHeader's size
        yield bytes(400)  # a small chunk's

    server = grpc.server(futures.ThreadPoolExecutor(16))
    handler = grpc.unary_stream_rpc_method_handler(capture)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("bare.Bare", {"Capture": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    sys.stdin.read()  # until the parent closes it
    server.stop(0)
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--calls", type=int, default=1000, help="calls per client per run")
    p.add_argument("--repeats", type=int, default=5, help="runs of each kind")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child()
    import grpc

    proc = subprocess.Popen(
        [sys.executable, __file__, "--child"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    port = int(proc.stdout.readline())
    channels = [grpc.insecure_channel(f"127.0.0.1:{port}") for _ in range(args.clients)]
    stubs = [c.unary_stream(METHOD) for c in channels]

    def run(kind: bytes, calls: int) -> tuple[float, float]:
        def client(k):
            for _ in range(calls):
                for _message in stubs[k](kind, timeout=60):
                    pass

        threads = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
        cpu, start = cpu_seconds(proc.pid), time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        n = args.clients * calls
        return (cpu_seconds(proc.pid) - cpu) / n * 1e6, n / (time.perf_counter() - start)

    lines = [
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs; python "
        f"{platform.python_version()}, grpcio {grpc.__version__}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {args.clients} clients x "
        f"{args.calls} calls per run, {args.repeats} runs of each kind, interleaved"
    ]
    print(lines[0], flush=True)
    try:
        run(HEADER, 50), run(METADATA, 50)  # connect, warm
        runs: dict[bytes, list[float]] = {HEADER: [], METADATA: []}
        names = {HEADER: "in the header", METADATA: "metadata sent"}
        for r in range(args.repeats):
            for kind in (HEADER, METADATA) if r % 2 == 0 else (METADATA, HEADER):
                load = os.getloadavg()[0]
                us, rate = run(kind, args.calls)
                runs[kind].append(us)
                lines.append(
                    f"  {names[kind]:>13}: server {us:6.1f} CPU us per call, {rate:5.0f} "
                    f"calls/s, load average {load:.1f} at start"
                )
                print(lines[-1], flush=True)
    finally:
        for c in channels:
            c.close()
        proc.stdin.close()
        proc.wait(30)
    least = {k: min(v) for k, v in runs.items()}
    median = {k: statistics.median(v) for k, v in runs.items()}
    diff = statistics.median(h - m for h, m in zip(runs[HEADER], runs[METADATA], strict=True))
    lines.append(
        f"server CPU us per call, least: in the header {least[HEADER]:.1f}, metadata sent "
        f"{least[METADATA]:.1f} (header/metadata {least[HEADER] / least[METADATA]:.3f}); "
        f"median: {median[HEADER]:.1f} and {median[METADATA]:.1f} "
        f"({median[HEADER] / median[METADATA]:.3f}); median of the rounds' differences "
        f"{diff:+.1f} us"
    )
    print(lines[-1], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
