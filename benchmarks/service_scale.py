"""Service at scale (issue 32): the service against its own ceilings, ratios from one run.

    .venv/bin/python benchmarks/service_scale.py [--model PATH] [--only CASE ...] [--quick]

The ratios, each numerator and denominator measured in this one run:
  e2e:        one large request (246 texts of ~100 tokens, full capture, float32,
              codec none) through a server in a child process, against the same
              capture by the in-process engine (`Engine.capture`);
  replay:     the same request against a server whose engine replays captures it
              computed on a first pass (the service's own path: batcher, encode,
              gRPC, client decode), coalesced (the client's default: several items
              per message, CaptureRequest.coalesce) and plain (one item per
              message), each against a bare grpc-python server streaming the
              same number of bytes in messages of the default chunk size to a client
              that only counts them (`--child bare`), all three in each repeat;
  small:      the same three on many small examples (the 256 short sentences of
              `concurrent` four times over, attention alone: 2 messages each when plain);
  concurrent: 32 client threads sending one short EWT sentence per request to a
              micro-batching server, against the in-process engine capturing the
              same sentences in one call (its throughput ceiling).
  replicas:   the same 32 clients, as threads of `--client-processes` processes
              (their own interpreter locks), each client round-robin over
              `--replicas` servers on this host sharing its device (one per few
              cores: a server process's per-request Python caps it, however fast the
              engine), against the same ceiling.

Servers run in child processes (their own GIL). `--profile DIR` runs one case
under py-spy (when on PATH or at /tmp/pyspy-venv/bin/py-spy), server and client
sampled as separate processes, and writes each one's top functions.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import service_bench as sb  # noqa: E402 (a script beside this one)

from jaxattn.bench.capture import FULL  # noqa: E402
from jaxattn.wire.codecs import DEFAULT_MAX_CHUNK_BYTES  # noqa: E402

METHOD = "/bench.Bare/Stream"
CASES = ("e2e", "replay", "small", "concurrent", "replicas")


# -- children --------------------------------------------------------------------------


class CachedReplay:
    """The real engine, but an example already computed under a spec is replayed.

    Keyed per example (not per call): the batcher runs a large request in pieces,
    so a per-call key would never hit.
    """

    def __init__(self, engine):
        self.engine, self.info = engine, engine.info
        self.make_spec, self.tokenize = engine.make_spec, engine.tokenize
        self.output_bytes = engine.output_bytes
        self.cache: dict = {}

    def run(self, tokenized, spec):
        missing = [p for p, e in enumerate(tokenized) if (spec, e.ids) not in self.cache]
        if missing:
            done = dict(self.engine.run([tokenized[p] for p in missing], spec))
            for k, p in enumerate(missing):
                self.cache[spec, tokenized[p].ids] = done[k]
        for p, e in enumerate(tokenized):
            yield p, self.cache[spec, e.ids]


def warm(engine, texts: list[str], largest: int = 64) -> None:
    """Compile every (bucket, batch size) a merged batch of these texts can meet.

    A batch splits into sizes of the engine's ladder (powers of two); one
    capture of n copies of a text, for each n of the ladder up to `largest`,
    compiles (bucket, n) for that text's bucket. (`service_bench.warm`'s one
    capture of 63 copies now plans one padded batch of 64: smaller sizes would
    compile while the concurrency run is timed.)
    """
    by_bucket = {}
    for text, enc in zip(texts, engine.tokenize(texts), strict=True):
        by_bucket.setdefault(next(b for b in engine.buckets if b >= enc.length), text)
    for text in by_bucket.values():
        n = 1
        while n <= largest:
            engine.capture([text] * n)
            n *= 2


def service_child(args) -> int:
    import logging

    import jaxattn
    from service.server import create_server

    logging.basicConfig(level=logging.WARNING)
    engine = jaxattn.load(args.model)
    if args.warm:
        warm(engine, Path(args.warm).read_text().splitlines())
    if args.child == "replay":
        engine = CachedReplay(engine)
    server, port = create_server(engine, "127.0.0.1:0", max_tokens=1 << 20, queue_size=128)
    server.start()
    return sb.serve_until_sigterm(server, port)


def bare_child(args) -> int:
    """A grpc-python server streaming the bytes a request names in messages of the
    default chunk size: pre-built ("N"), or each built as the service builds a chunk's
    message ("copy N": a new bytes object filled by one copy from a tensor-sized
    source array, its CRC-32 computed over it), the floor of the service's send."""
    from concurrent import futures

    import grpc
    import numpy as np

    from jaxattn.wire import protowire
    from jaxattn.wire.codecs import checksum

    size = DEFAULT_MAX_CHUNK_BYTES
    pool = [os.urandom(size) for _ in range(8)]  # distinct objects, built before any call
    source = np.frombuffer(os.urandom(256 << 20), np.uint8)  # larger than any cache

    def built(k: int, n: int) -> bytes:
        message, view = protowire.new_bytes(n)
        at = (k * size) % (len(source) - size)
        np.copyto(view, source[at : at + n])
        checksum(view)
        return message

    def stream(request, context):
        *mode, total = request.split()
        total = int(total)
        for k in range(-(-total // size)):
            n = min(size, total - k * size)
            if mode == ["copy"]:
                yield built(k, n)
            else:
                yield pool[k % len(pool)] if n == size else pool[0][:n]

    handler = grpc.method_handlers_generic_handler(
        "bench.Bare",
        {
            "Stream": grpc.unary_stream_rpc_method_handler(
                stream, request_deserializer=bytes.decode, response_serializer=None
            )
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(4))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return sb.serve_until_sigterm(server, port)


def child_env() -> dict[str, str]:
    """A server child's environment: the benchmark's compilation cache, and no
    preallocation of the device's memory. The parent holds its own engine on the same
    device all along (the ceilings, `jaxattn.load` in `main`), and each replica shares it
    too: XLA preallocates 75 % of a GPU's memory in every process otherwise, and a
    second process cannot start beside the first (JAX's "GPU memory allocation": running
    several JAX processes at once)."""
    return dict(
        os.environ,
        JAXATTN_COMPILATION_CACHE=str(Path(tempfile.gettempdir()) / "jaxattn-bench-cache"),
        XLA_PYTHON_CLIENT_PREALLOCATE="false",
    )


@contextlib.contextmanager
def child_process(kind, model=None, warm=None):
    """A server child (`kind`: service, replay, bare; environment `child_env`); yields
    (address, pid)."""
    cmd = [sys.executable, __file__, "--child", kind] + (["--model", model] if model else [])
    cmd += ["--warm", warm] if warm else []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=child_env())
    try:
        yield f"127.0.0.1:{int(proc.stdout.readline())}", proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


# -- profiling ---------------------------------------------------------------------------


def py_spy() -> str | None:
    return shutil.which("py-spy") or next(
        (p for p in ("/tmp/pyspy-venv/bin/py-spy",) if os.path.exists(p)), None
    )


def start_spy(pid: int, out: Path) -> subprocess.Popen:
    cmd = [py_spy(), "record", "-p", str(pid), "-f", "raw", "-o", str(out), "-r", "200"]
    cmd += ["--nonblocking", "--threads"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_spy(spy: subprocess.Popen) -> None:
    spy.send_signal(signal.SIGINT)
    spy.wait(60)


def top(raw: Path, n: int = 12) -> list[str]:
    """The `n` functions with the most samples on top of the stack (self), with their
    share of all samples, and the same for inclusive counts, from py-spy's raw output."""
    own, incl, total = collections.Counter(), collections.Counter(), 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")[1:]  # the first frame names the thread
        if not frames or frames[-1].split(" (")[0] in IDLE:
            continue
        total += int(count)
        own[_short(frames[-1])] += int(count)
        for f in {_short(f) for f in frames}:
            incl[f] += int(count)
    rows = [f"{total} samples (threads waiting in {', '.join(IDLE)} left out); self:"]
    rows += [f"  {c / total:6.1%}  {f}" for f, c in own.most_common(n)]
    rows += ["inclusive:"]
    rows += [f"  {c / total:6.1%}  {f}" for f, c in incl.most_common(n)]
    return rows


# Leaf frames of a thread blocked on a lock or an event (not working).
IDLE = ("Condition.wait", "Event.wait")


def _short(frame: str) -> str:
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    path, _, line = where.rpartition(":")
    return f"{name} ({'/'.join(Path(path).parts[-2:])})"


@contextlib.contextmanager
def profiled(profile: Path | None, name: str, server_pid: int):
    """py-spy on this process (the client) and the server while the block runs; the
    samples of repeated blocks go to new files (NAME-client-K.txt, NAME-server-K.txt)."""
    if profile is None:
        yield
        return
    k = len(list(profile.glob(f"{name}-client*.txt")))
    spies = [
        start_spy(os.getpid(), profile / f"{name}-client-{k}.txt"),
        start_spy(server_pid, profile / f"{name}-server-{k}.txt"),
    ]
    time.sleep(1.0)  # py-spy attaches
    try:
        yield
    finally:
        for spy in spies:
            stop_spy(spy)


# -- measurements ------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (all its threads)."""
    return sum(process_counters(pid)[:2])


def process_counters(pid: int) -> tuple[float, float, int]:
    """User CPU seconds, system CPU seconds and minor page faults of a process so far
    (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick, int(fields[7])


@contextlib.contextmanager
def cpu_time(record: dict, server_pid: int):
    """Adds the CPU seconds the client (this process) and the server spent in the
    block to `record` (client_cpu_s, server_cpu_s): on a shared machine, a cost
    other jobs' load does not inflate the way it inflates wall time. Beside them,
    each side's system seconds and minor page faults (`*_sys_s`, `*_faults`): the
    kernel's share of the cost (socket copies, pages touched for the first time)."""
    before = {"client": process_counters(os.getpid()), "server": process_counters(server_pid)}
    try:
        yield
    finally:
        for side, pid in (("client", os.getpid()), ("server", server_pid)):
            user, system, faults = (
                b - a for a, b in zip(before[side], process_counters(pid), strict=True)
            )
            record[f"{side}_cpu_s"] = round(user + system, 2)
            record[f"{side}_sys_s"] = round(system, 2)
            record[f"{side}_faults"] = faults


def bare_request(address: str, nbytes: int, copy: bool = False) -> dict:
    """One call to the bare server; `copy`: its messages built as the service builds
    them, and this client checks each one's CRC-32 as the service's client does (the
    floor of the service path: the copy and checksum its protocol needs, no more)."""
    import grpc

    from jaxattn.wire.codecs import checksum

    opts = [("grpc.max_receive_message_length", 64 << 20)]
    with grpc.insecure_channel(address, opts) as channel:
        call = channel.unary_stream(
            METHOD, request_serializer=str.encode, response_deserializer=None
        )
        start, got = time.perf_counter(), 0
        for message in call(f"copy {nbytes}" if copy else str(nbytes), timeout=600):
            got += len(message)
            if copy:
                checksum(message)
        seconds = time.perf_counter() - start
    assert got == nbytes, (got, nbytes)
    return dict(seconds=seconds, bytes=got)


def engine_capture(engine, texts, what) -> dict:
    start = time.perf_counter()
    caps = engine.capture(texts, what=what)
    seconds = time.perf_counter() - start
    decoded = sum(a.nbytes for c in caps for a in c.tensors.values())
    return dict(seconds=seconds, decoded=decoded, n=len(caps))


class Report(list):
    def append(self, line: str) -> None:
        print(line, flush=True)
        super().append(line)


def run_e2e(args, engine, texts, out, raw, profile):
    log = raw.setdefault("e2e", [])
    engine_capture(engine, texts, FULL)  # warm: compile every shape
    with child_process("service", args.model) as (address, pid):
        sb.big_request(address, texts, FULL, "float32", "none")  # warm the server
        for _ in range(args.repeats):
            e = engine_capture(engine, texts, FULL)
            s_cpu = {}
            with profiled(profile, "e2e", pid), cpu_time(s_cpu, pid):
                s = sb.big_request(address, texts, FULL, "float32", "none")
            s |= s_cpu
            log.append(dict(engine=e, service=s))
            print(f"  e2e: engine {e} service {s}", file=sys.stderr, flush=True)
    best_e = min(r["engine"]["seconds"] for r in log)
    best_s = min(r["service"]["seconds"] for r in log)
    pairs = ", ".join(f"{r['service']['seconds'] / r['engine']['seconds']:.2f}x" for r in log)
    out.append(
        f"- **e2e**: {len(texts)} texts, full capture, float32, codec none, "
        f"{log[0]['engine']['decoded'] / 1e9:.2f} GB: engine {best_e:.2f} s, service "
        f"{best_s:.2f} s (best of {len(log)} each): **{best_s / best_e:.2f}x** "
        f"(pairs: {pairs}; target <= 1.15x)"
    )


def stream_messages(address: str, texts, what, coalesce: bool) -> dict:
    """One Capture call's stream through raw gRPC, nothing decoded: its seconds, bytes
    and messages (the service's send path without the client's decoding)."""
    import grpc

    from jaxattn.v1 import attention_pb2 as pb

    request = pb.CaptureRequest(
        texts=[pb.Text(text=t) for t in texts], what=list(what), coalesce=coalesce
    )
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_stream(
            "/jaxattn.v1.AttentionService/Capture",
            request_serializer=pb.CaptureRequest.SerializeToString,
            response_deserializer=None,
        )
        start, got, count = time.perf_counter(), 0, 0
        for message in call(request, timeout=600):
            got, count = got + len(message), count + 1
        return dict(seconds=time.perf_counter() - start, bytes=got, messages=count)


def run_replay(args, texts, out, raw, profile, case="replay", what=FULL):
    """The service path, coalesced and plain, against bare gRPC on the same bytes."""
    log = raw.setdefault(case, [])
    with child_process("replay", args.model) as (address, pid):
        first = sb.big_request(address, texts, what, "float32", "none")  # fill the cache
        nbytes = first["decoded"]
        sb.big_request(address, texts, what, "float32", "none", coalesce=False)  # warm
        counts = {c: stream_messages(address, texts, what, c)["messages"] for c in (True, False)}
        with child_process("bare") as (bare, bare_pid):
            bare_request(bare, nbytes)  # connect, warm
            for _ in range(args.repeats):
                s_cpu, p_cpu, b_cpu = {}, {}, {}
                with profiled(profile, case, pid), cpu_time(s_cpu, pid):
                    s = sb.big_request(address, texts, what, "float32", "none")
                with profiled(profile, f"{case}-plain", pid), cpu_time(p_cpu, pid):
                    p = sb.big_request(address, texts, what, "float32", "none", coalesce=False)
                with profiled(profile, f"{case}-bare", bare_pid), cpu_time(b_cpu, bare_pid):
                    b = bare_request(bare, nbytes)
                r_cpu, f_cpu = {}, {}
                with cpu_time(r_cpu, pid):
                    r = stream_messages(address, texts, what, True)
                with cpu_time(f_cpu, bare_pid):
                    f = bare_request(bare, nbytes, copy=True)
                s, p, b, r, f = s | s_cpu, p | p_cpu, b | b_cpu, r | r_cpu, f | f_cpu
                log.append(dict(service=s, plain=p, bare=b, undecoded=r, floor=f))
                print(
                    f"  {case}: coalesced {s} plain {p} bare {b} undecoded {r} floor {f}",
                    file=sys.stderr,
                    flush=True,
                )
    n = len(texts)
    bare_messages = -(-nbytes // DEFAULT_MAX_CHUNK_BYTES)
    out.append(
        f"- **{case}**: {n} texts, {', '.join(what)}, float32, codec none, "
        f"{nbytes / 1e9:.2f} GB; messages: coalesced {counts[True]} "
        f"({counts[True] / n:.2f} per example), plain {counts[False]} "
        f"({counts[False] / n:.2f}), bare {bare_messages} ({bare_messages / n:.2f})"
    )
    b_rate = max(_rate(r["bare"]) for r in log)
    for side, label in (("service", "coalesced"), ("plain", "plain")):
        rate = max(_rate(r[side]) for r in log)
        pairs = ", ".join(f"{_rate(r[side]) / _rate(r['bare']):.2f}x" for r in log)
        out.append(
            f"  {label}: service {rate / 1e9:.2f} GB/s, bare grpc-python {b_rate / 1e9:.2f} "
            f"GB/s (best of {len(log)} each): **{rate / b_rate:.2f}x** (pairs: {pairs}; "
            "target >= 0.8x)"
        )
    pairs = ", ".join(f"{_rate(r['service']) / _rate(r['plain']):.2f}x" for r in log)
    out.append(f"  coalesced / plain wall-time rate, each repeat: {pairs}")
    for side, label in DECOMPOSED:
        rate = max(_rate(r[side]) for r in log)
        pairs = ", ".join(f"{_rate(r[side]) / _rate(r['bare']):.2f}x" for r in log)
        out.append(
            f"  {label}: {rate / 1e9:.2f} GB/s, **{rate / b_rate:.2f}x** bare (pairs: {pairs})"
        )
    for side in ("service", "plain", "bare", "undecoded", "floor"):
        gb = nbytes / 1e9
        server = min(r[side]["server_cpu_s"] for r in log) / gb
        client = min(r[side]["client_cpu_s"] for r in log) / gb

        def sys_s(who, side=side, gb=gb):
            return min(r[side][f"{who}_sys_s"] for r in log) / gb

        def faults(who, side=side, gb=gb):
            return min(r[side][f"{who}_faults"] for r in log) / gb

        out.append(
            f"  CPU seconds per GB, {'coalesced' if side == 'service' else side} (least of "
            f"{len(log)}): server {server:.2f} (system {sys_s('server'):.2f}), client "
            f"{client:.2f} (system {sys_s('client'):.2f}); page faults per GB server "
            f"{faults('server'):,.0f}, client {faults('client'):,.0f}"
        )


# The service path's ratio taken apart: its stream read but not decoded (the server's
# share), and bare gRPC doing only the copy and the checksums the protocol needs.
DECOMPOSED = (
    ("undecoded", "coalesced, counted by a raw gRPC client (no decoding)"),
    ("floor", "bare gRPC + one copy into each message + CRC-32 on each side"),
)


def _rate(r: dict) -> float:
    return r.get("decoded", r.get("bytes", 0)) / r["seconds"]


def run_concurrent(args, engine, short, warm_file, out, raw, profile):
    log = raw.setdefault("concurrent", {})
    engine_capture(engine, short, ("attention",))  # warm
    ceilings = [engine_capture(engine, short, ("attention",)) for _ in range(3)]
    ceiling = max(c["n"] / c["seconds"] for c in ceilings)
    with child_process("service", args.model, warm=warm_file) as (address, pid):
        sb.concurrent(address, short, seconds=2)  # connect, settle
        cpu = {}
        with profiled(profile, "concurrent", pid), cpu_time(cpu, pid):
            rate, latency = sb.concurrent(address, short, seconds=args.seconds)
        # The same threads sharing one client (one channel), as a threaded program would.
        shared, shared_latency = sb.concurrent(address, short, seconds=args.seconds, shared=True)
    after = engine_capture(engine, short, ("attention",))
    log.update(
        engine_per_s=[c["n"] / c["seconds"] for c in ceilings + [after]],
        rate=rate,
        latency=latency,
        cpu=cpu,
        shared_rate=shared,
        shared_latency=shared_latency,
    )
    n = rate * args.seconds
    out.append(
        f"- **32 concurrent clients**, one EWT sentence of 6-10 words per request, "
        f"attention float32, {args.seconds:g} s: {rate:.0f} requests/s (mean latency "
        f"{latency * 1e3:.0f} ms); the engine on the same {len(short)} sentences in one "
        f"call: {ceiling:.0f}/s (best of 3 before; {after['n'] / after['seconds']:.0f}/s "
        f"after): **{rate / ceiling:.0%}** (target >= 80%). CPU ms per request: server "
        f"{cpu['server_cpu_s'] / n * 1e3:.1f}, client {cpu['client_cpu_s'] / n * 1e3:.1f}; "
        f"engine alone {1e3 / ceiling:.1f} ms of wall per sentence. The same 32 threads "
        f"sharing one client (one channel): {shared:.0f} requests/s "
        f"({shared_latency * 1e3:.0f} ms): {shared / ceiling:.0%}"
    )


def client_addresses(addresses: list[str], client: int) -> list[str]:
    """The address list of client number `client`: `addresses` rotated by it, so that
    the clients' round-robins start evenly spread over the servers (`clients_child` has
    each start at its first address, not at the random one a client starts at, which
    spreads 32 clients over a few servers unevenly). Started all at one address, every
    client sent its warm-up call to the first server and its first timed call to the
    second, together, one convoy that a micro-batching server, answering them together,
    keeps together for a while (3 in-process servers, 32 clients, 2 cores: the busiest
    server held 99 % of the calls in flight over a cold first 4 s, 50-64 % warm,
    against 46-47 % rotated)."""
    k = client % len(addresses)
    return addresses[k:] + addresses[:k]


def clients_child(args) -> int:
    """`--child clients`: `--threads` clients (threads, each its own AttentionClient
    round-robin over `--addresses`, the list rotated by its number from `--first-client`
    on: `client_addresses`) sending one sentence of `--warm`'s file per request from the
    wall-clock time `--start-at` for `--seconds`; prints one JSON line: the requests
    answered within those seconds, the sum of their latencies and this process's CPU
    seconds."""
    from jaxattn.client import AttentionClient, channels

    channels.first_turn = lambda n: 0  # the rotated lists spread the clients evenly
    pool = Path(args.warm).read_text().splitlines()
    addresses = args.addresses.split(",")
    counts, latencies, stop = [0] * args.threads, [], threading.Event()
    end = args.start_at + args.seconds  # a call answered later is not counted

    def worker(k):
        mine = client_addresses(addresses, args.first_client + k)
        with AttentionClient(mine, timeout=120) as client:
            client.capture([pool[k % len(pool)]])  # connected before the start
            time.sleep(max(0.0, args.start_at - time.time()))
            i = k
            while not stop.is_set():
                t = time.perf_counter()
                client.capture([pool[i % len(pool)]])
                if time.time() > end:
                    break
                latencies.append(time.perf_counter() - t)
                counts[k] += 1
                i += args.threads

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(args.threads)]
    for t in threads:
        t.start()
    time.sleep(max(0.0, args.start_at - time.time()))
    cpu0 = time.process_time()
    time.sleep(args.seconds)
    stop.set()
    for t in threads:
        t.join()
    cpu = time.process_time() - cpu0
    print(json.dumps({"n": sum(counts), "latency_s": sum(latencies), "cpu_s": cpu}), flush=True)
    return 0


def _end_all(children: list[subprocess.Popen]) -> None:
    """Kill the client processes still running (an error, or ^C, in the parent)."""
    for child in children:
        if child.poll() is None:
            child.kill()
            child.wait(10)


def run_replicas(args, engine, short, warm_file, out, raw):
    """32 clients in `args.client_processes` processes against each of `args.replicas`
    numbers of servers on this host (module docstring), and the engine's one-call
    ceiling before and after each."""
    for replicas in args.replicas:
        log = raw.setdefault("replicas", {}).setdefault(str(replicas), {})
        run_replica_set(args, replicas, engine, short, warm_file, out, log)


def run_replica_set(args, replicas, engine, short, warm_file, out, log):
    """`run_replicas` of one number of servers, into `log`."""
    engine_capture(engine, short, ("attention",))  # warm
    ceilings = [engine_capture(engine, short, ("attention",)) for _ in range(3)]
    ceiling = max(c["n"] / c["seconds"] for c in ceilings)
    clients, procs = 32, args.client_processes
    with contextlib.ExitStack() as stack:
        servers = [
            stack.enter_context(child_process("service", args.model, warm=warm_file))
            for _ in range(replicas)
        ]
        addresses = ",".join(a for a, _ in servers)
        pids = [pid for _, pid in servers]
        lead = 3.0 + 0.5 * procs  # the client processes start and connect meanwhile
        start_at = time.time() + lead
        cmd = [sys.executable, __file__, "--child", "clients", "--warm", warm_file]
        cmd += ["--addresses", addresses, "--start-at", repr(start_at)]
        cmd += ["--seconds", str(args.seconds)]
        threads = [clients // procs + (k < clients % procs) for k in range(procs)]
        children = []
        stack.callback(_end_all, children)  # none left behind, whatever fails
        for k, n in enumerate(threads):
            first = str(sum(threads[:k]))  # the clients' numbers: 0 .. 31 over all
            children.append(
                subprocess.Popen(
                    cmd + ["--threads", str(n), "--first-client", first],
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        time.sleep(max(0.0, start_at - time.time()))
        before = [cpu_seconds(pid) for pid in pids]
        time.sleep(args.seconds)
        server_cpu = sum(cpu_seconds(pid) for pid in pids) - sum(before)
        got = [json.loads(c.communicate(timeout=120 + args.seconds)[0]) for c in children]
    after = engine_capture(engine, short, ("attention",))
    n = sum(g["n"] for g in got)
    rate = n / args.seconds
    latency = sum(g["latency_s"] for g in got) / max(n, 1)
    client_cpu = sum(g["cpu_s"] for g in got)
    log.update(
        replicas=replicas,
        client_processes=procs,
        engine_per_s=[c["n"] / c["seconds"] for c in ceilings + [after]],
        rate=rate,
        latency=latency,
        server_cpu_s=server_cpu,
        client_cpu_s=client_cpu,
    )
    out.append(
        f"- **32 clients, {procs} client processes, {replicas} replicas on this host "
        f"sharing its device**, one EWT sentence per request, attention float32, "
        f"{args.seconds:g} s: {rate:.0f} requests/s (mean latency {latency * 1e3:.0f} ms); "
        f"the engine on the same {len(short)} sentences in one call: {ceiling:.0f}/s (best "
        f"of 3 before; {after['n'] / after['seconds']:.0f}/s after): **{rate / ceiling:.0%}** "
        f"(target >= 80%). CPU ms per request: servers {server_cpu / max(n, 1) * 1e3:.1f}, "
        f"clients {client_cpu / max(n, 1) * 1e3:.1f}"
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="checkpoint (default: embedded all-MiniLM-L6-v2)")
    p.add_argument("--conllu", type=Path, default=sb.CONLLU)
    p.add_argument("--texts", type=int, default=246)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--only", nargs="+", choices=CASES, default=list(CASES))
    p.add_argument("--quick", action="store_true", help="32 texts, 3 s, 1 repeat")
    p.add_argument("--profile", type=Path, help="py-spy each server and client into DIR")
    p.add_argument("--json", type=Path, help="write the raw measurements here")
    p.add_argument(
        "--replicas", type=int, nargs="+", default=[3], help="servers of the replicas case"
    )
    p.add_argument(
        "--client-processes", type=int, default=4, help="client processes of the replicas case"
    )
    p.add_argument(
        "--child", choices=("service", "replay", "bare", "clients"), help=argparse.SUPPRESS
    )
    p.add_argument("--warm", help=argparse.SUPPRESS)
    p.add_argument("--addresses", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, help=argparse.SUPPRESS)
    p.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    p.add_argument("--first-client", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child == "bare":
        return bare_child(args)
    if args.child == "clients":
        return clients_child(args)
    if args.child:
        return service_child(args)
    if args.quick:
        args.texts, args.seconds, args.repeats = 32, 3.0, 1
    if args.profile is not None:
        if py_spy() is None:
            p.error("--profile needs py-spy on PATH or at /tmp/pyspy-venv/bin/py-spy")
        args.profile.mkdir(parents=True, exist_ok=True)
    import jaxattn

    pool = sb.sentences(args.conllu)
    texts = sb.long_texts(pool, args.texts)
    short = [s for s in pool if 6 <= len(s.split()) <= 10][:256]
    warm_file = Path(tempfile.mkdtemp()) / "short.txt"
    warm_file.write_text("\n".join(short))
    out, raw = Report(), {}
    out.append(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f} at start; python "
        f"{platform.python_version()}; model {args.model or 'all-MiniLM-L6-v2'}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    engine = jaxattn.load(args.model)
    if "e2e" in args.only:
        run_e2e(args, engine, texts, out, raw, args.profile)
    if "replay" in args.only:
        run_replay(args, texts, out, raw, args.profile)
    if "small" in args.only:
        small = (short * 4)[:1024]  # the server's default max_texts
        run_replay(args, small, out, raw, args.profile, case="small", what=("attention",))
    if "concurrent" in args.only:
        warm(engine, short)
        run_concurrent(args, engine, short, str(warm_file), out, raw, args.profile)
    if "replicas" in args.only:
        warm(engine, short)
        run_replicas(args, engine, short, str(warm_file), out, raw)
    out.append(f"load average at end: {os.getloadavg()[0]:.1f}")
    if args.profile is not None:
        for f in sorted(args.profile.glob("*-[cs][le]*-[0-9]*.txt")):
            if f.stat().st_size:
                out.append(f"\nprofile {f.name}:")
                for line in top(f):
                    out.append(line)
    if args.json:
        args.json.write_text(json.dumps(raw, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
