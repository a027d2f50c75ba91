"""Service benchmark (issue 3): loopback gRPC, one Python client process.

    .venv/bin/python benchmarks/service_bench.py [--model PATH] [--conllu FILE] [--quick]

Servers run in child processes (this script with --child), so client and
server do not share a GIL. Measured:
  1. one large request (256 texts of ~100 tokens built from consecutive UD
     English EWT sentences, "full" capture = attention, queries, keys, fx_norm,
     alpha_fx_norm, sum_alpha_fx_norm) for each dtype x codec: decoded tensor
     GB/s received and wire bytes per example; once end to end on the real
     engine (warm: compiled by a first pass), once against a replaying engine
     (the same captures, precomputed) to isolate the service and the wire;
  2. uint8+zstd vs float32 wire size of attention alone on the same texts;
  3. time to first example of one short sentence on a warm server, p50/p99
     over 100 requests;
  4. throughput of 32 concurrent single-sentence clients with and without
     micro-batching.
Prints a markdown report for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from jaxattn.bench.capture import FULL
from jaxattn.bench.sentences import read_sentences
from jaxattn.dtypes import OUTPUT_DTYPES as DTYPES
from jaxattn.wire.codecs import CODECS

CONLLU = Path(__file__).resolve().parents[2] / "shared/data/ud-english-ewt/en_ewt-ud-dev.conllu"
SHORT = "I went to the store."


def sentences(conllu: Path) -> list[str]:
    return read_sentences(conllu, singles=True)


def long_texts(pool: list[str], n: int, words: int = 72) -> list[str]:
    """n texts of `words` to `words` + 40 words (~100 word pieces), consecutive sentences joined.

    Sentences over 40 words (URLs, lists) are skipped so no text nears the
    model's 512-token limit.
    """
    out, cur = [], []
    for s in pool * 4:
        if len(s.split()) > 40:
            continue
        cur.append(s)
        if sum(len(c.split()) for c in cur) >= words:
            out.append(" ".join(cur))
            cur = []
            if len(out) == n:
                return out
    raise ValueError("corpus too small")


# -- child: a server ------------------------------------------------------------------


class ReplayEngine:
    """The real engine, but a repeated (spec, inputs) is answered from memory."""

    def __init__(self, engine):
        self.engine, self.info = engine, engine.info
        self.make_spec, self.tokenize = engine.make_spec, engine.tokenize
        self.key, self.caps = None, None

    def run(self, tokenized, spec):
        key = (spec, tuple(e.ids for e in tokenized))
        if key != self.key:
            self.key, self.caps = None, dict(self.engine.run(tokenized, spec))
            self.key = key
        yield from self.caps.items()


def warm(engine, texts: list[str], largest: int = 64) -> None:
    """Compile every (bucket, batch size) the concurrency runs can meet, before serving.

    One capture of `largest - 1` copies of a text per bucket: its power-of-two
    split (32 + 16 + ... + 1) compiles each batch size of that bucket.
    """
    by_bucket = {}
    for text, enc in zip(texts, engine.tokenize(texts), strict=True):
        by_bucket.setdefault(next(b for b in engine.buckets if b >= enc.length), text)
    for text in by_bucket.values():
        engine.capture([text] * (largest - 1))


def child(args) -> int:
    import logging

    import jaxattn
    from service.server import create_server

    logging.basicConfig(level=logging.WARNING)
    engine = jaxattn.load(args.model)
    if args.warm:
        warm(engine, Path(args.warm).read_text().splitlines())
    if args.replay:
        engine = ReplayEngine(engine)
    server, port = create_server(
        engine, "127.0.0.1:0", micro_batching=not args.no_micro, max_tokens=1 << 20, queue_size=128
    )
    server.start()
    return serve_until_sigterm(server, port)


def serve_until_sigterm(server, port: int) -> int:
    """Print the port (the parent reads it), serve until SIGTERM, stop within 5 s."""
    print(port, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.wait(0.5):
        pass
    server.stop(5).wait()
    return 0


@contextlib.contextmanager
def server_process(model, *, no_micro=False, replay=False, warm=None):
    cmd = [sys.executable, __file__, "--child"] + (["--model", model] if model else [])
    cmd += ["--warm", warm] if warm else []
    cmd += ["--no-micro"] * no_micro + ["--replay"] * replay
    env = dict(
        os.environ,
        JAXATTN_COMPILATION_CACHE=str(Path(tempfile.gettempdir()) / "jaxattn-bench-cache"),
    )
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    try:
        yield f"127.0.0.1:{int(proc.stdout.readline())}"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


# -- client side ------------------------------------------------------------------------


def big_request(address, texts, what, dtype, codec, coalesce: bool = True) -> dict:
    """One request through AttentionClient.stream, counting decoded and wire bytes
    (`coalesce`: the client's CaptureRequest.coalesce, on by default as the client's)."""
    from jaxattn.client import AttentionClient

    with AttentionClient(address, timeout=1800, coalesce=coalesce) as client:
        decoded = tokens = n = 0
        start = time.perf_counter()
        for cap in client.stream(texts, what=what, dtype=dtype, codec=codec):
            decoded += sum(a.nbytes for a in cap.tensors.values())
            tokens += cap.length
            n += 1
        seconds = time.perf_counter() - start
        wire = client.wire_bytes
    assert n == len(texts)
    return dict(seconds=seconds, decoded=decoded, wire=wire, n=n, tokens=tokens / n)


def table(address, texts, label) -> list[str]:
    rows = [
        f"| {label} | dtype | codec | s | decoded GB/s | MB/example decoded | "
        "MB/example on the wire | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for dtype in DTYPES:
        big_request(address, texts, FULL, dtype, "none")  # warm: compile / fill the replay
        for codec in CODECS:
            r = big_request(address, texts, FULL, dtype, codec)
            print(f"  {label} {dtype}/{codec}: {r}", file=sys.stderr, flush=True)
            rate = r["decoded"] / r["seconds"] / 1e9
            rows.append(
                f"| | {dtype} | {codec} | {r['seconds']:.2f} | {rate:.2f}"
                f" | {r['decoded'] / r['n'] / 1e6:.2f} | {r['wire'] / r['n'] / 1e6:.3f} |"
                f" {r['decoded'] / r['wire']:.1f}x |"
            )
    return rows + [f"\n(mean example length {r['tokens']:.0f} tokens, {r['n']} examples)"]


def attention_ratio(address, texts) -> str:
    raw = big_request(address, texts, ("attention",), "float32", "none")
    small = big_request(address, texts, ("attention",), "uint8", "zstd")
    return (
        f"attention only, {len(texts)} texts: float32/none {raw['wire'] / raw['n'] / 1e3:.1f}"
        f" kB/example, uint8/zstd {small['wire'] / small['n'] / 1e3:.1f} kB/example: "
        f"**{raw['wire'] / small['wire']:.1f}x smaller**"
    )


def time_to_first(address, n=100) -> str:
    from jaxattn.client import AttentionClient

    times = []
    with AttentionClient(address) as client:
        for _ in range(10):
            client.capture([SHORT])  # warm
        for _ in range(n):
            start = time.perf_counter()
            stream = client.stream([SHORT])
            next(stream)
            times.append(time.perf_counter() - start)
            stream.close()
    times.sort()
    p50, p99 = statistics.median(times), times[int(0.99 * (n - 1))]
    return (
        f"time to first example, {SHORT!r}, attention float32: p50 {p50 * 1e3:.1f} ms, "
        f"p99 {p99 * 1e3:.1f} ms over {n} requests"
    )


def concurrent(
    address, pool, clients=32, seconds=15.0, shared=False, weights_in_header=True
) -> tuple[float, float]:
    """Requests/s and mean latency of `clients` threads sending one sentence per request,
    each with its own AttentionClient (its own channel), or sharing one (`shared`);
    `weights_in_header` False asks as a client that predates the field."""
    from jaxattn.client import AttentionClient

    def made():
        client = AttentionClient(address, timeout=120)
        client.weights_in_header = weights_in_header
        return client

    counts, latencies, stop = [0] * clients, [], threading.Event()
    one = made() if shared else None

    def worker(k):
        with contextlib.nullcontext(one) if shared else made() as client:
            i = k
            while not stop.is_set():
                t = time.perf_counter()
                client.capture([pool[i % len(pool)]])
                latencies.append(time.perf_counter() - t)
                counts[k] += 1
                i += clients

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if one is not None:
        one.close()
    return sum(counts) / elapsed, statistics.mean(latencies)


class Report(list):
    """Lines of the report, printed as they are added (a long run shows progress)."""

    def append(self, line: str) -> None:
        print(line, flush=True)
        super().append(line)

    def __iadd__(self, lines):
        for line in lines:
            self.append(line)
        return self


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="checkpoint (default: embedded all-MiniLM-L6-v2)")
    p.add_argument("--conllu", type=Path, default=CONLLU)
    p.add_argument("--texts", type=int, default=256)
    p.add_argument("--seconds", type=float, default=15.0, help="per concurrency run")
    p.add_argument("--quick", action="store_true", help="16 texts, 3 s runs (smoke test)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-micro", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--replay", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--warm", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    if args.quick:
        args.texts, args.seconds = 16, 3.0
    pool = sentences(args.conllu)
    texts = long_texts(pool, args.texts)
    short = [s for s in pool if 6 <= len(s.split()) <= 10][:256]
    out = Report()
    out += [
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"no GPU; python {platform.python_version()}; model {args.model or 'all-MiniLM-L6-v2'}"
    ]
    warm_file = Path(tempfile.mkdtemp()) / "short.txt"
    warm_file.write_text("\n".join(short))
    with server_process(args.model, no_micro=True, warm=str(warm_file)) as address:
        concurrent(address, short, seconds=2)  # connect, settle
        off = concurrent(address, short, seconds=args.seconds)
    with server_process(args.model, warm=str(warm_file)) as address:
        concurrent(address, short, seconds=2)
        on = concurrent(address, short, seconds=args.seconds)
        out.append(
            f"32 concurrent single-sentence clients: micro-batching {on[0]:.0f} req/s "
            f"(mean latency {on[1] * 1e3:.0f} ms), one request per batch {off[0]:.0f} "
            f"req/s ({off[1] * 1e3:.0f} ms): **{on[0] / off[0]:.1f}x**"
        )
        out.append(time_to_first(address))
        out += table(address, texts, "real engine")
        out.append(attention_ratio(address, texts))
    with server_process(args.model, replay=True) as address:
        out += table(address, texts, "replayed (service + wire only)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
