"""A load generator for the attention service: many clients, every answer checked.

    from jaxattn.bench.load_generator import LoadRequest, run_load
    result = run_load("127.0.0.1:50051", requests, expectations, clients=64,
                      max_requests=10_000, duration=600, server_pid=pid)
    print(result.summary())

Each client is a thread with its own `AttentionClient` (its own channel and
connection), sending requests drawn at random by weight from a fixed set and
checking every answer against its expectation (`jaxattn.bench.expect`): every
answer, in full (the check rate is 1; the wire's per-chunk crc32 is checked by
the client's decoder besides). A request may be *cancelled* (`cancel_after`:
the client reads that many examples, checks them, and closes the stream) or
carry a *deadline* (`timeout`, seconds). Errors are counted by status code, and
those not designed for the request (`DESIGNED`, plus DEADLINE_EXCEEDED for a
request with a deadline) also by kind in `undesigned`; RESOURCE_EXHAUSTED (the
server's designed answer to overload) makes that client back off briefly. A
sampler reads the server's resident memory from /proc/PID/status while the load
runs.
Numpy and grpc only (no jax): run it on any client machine.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import random
import threading
import time
from collections.abc import Callable, Sequence

from jaxattn.bench.expect import ExampleExpectation, check_answer
from jaxattn.client.client import AttentionClient
from jaxattn.client.errors import AttentionServiceError
from jaxattn.errors import UsageError

# Status codes a load run may answer with by design, whatever the request: the
# server's answer to overload. A request with a deadline (`LoadRequest.timeout`)
# may also end DEADLINE_EXCEEDED. Anything else is counted in `undesigned`.
DESIGNED = frozenset({"RESOURCE_EXHAUSTED"})
# Checking an answer costs a few float64 copies of it: answers over this many bytes
# are checked at most `HEAVY_CHECKS` at a time, so many clients receiving long texts
# at once do not multiply that transient memory (the 128-client faulty-network trial
# of issue 33 ran its load generator out of memory without this bound).
HEAVY_BYTES = 8 << 20
HEAVY_CHECKS = 2


@dataclasses.dataclass(frozen=True)
class LoadRequest:
    """One kind of request in the mix (sent many times)."""

    kind: str  # e.g. "single", "pair", "batch50", "long"
    texts: tuple
    what: tuple[str, ...] = ("attention",)
    layers: tuple[int, ...] | None = None
    heads: tuple[int, ...] | None = None
    dtype: str = "float32"
    codec: str = "none"
    weight: float = 1.0
    cancel_after: int | None = None  # read this many examples, then close the stream
    timeout: float | None = None  # the call's deadline in seconds (None: the client's)

    def designed(self) -> frozenset[str]:
        """The status codes this request may end with by design (`DESIGNED`)."""
        return DESIGNED | ({"DEADLINE_EXCEEDED"} if self.timeout is not None else set())


@dataclasses.dataclass
class LoadResult:
    """What a load run saw. Latencies are seconds per successful request."""

    requests: int = 0
    ok: int = 0
    examples: int = 0
    elapsed_s: float = 0.0
    errors: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    wrong: list[str] = dataclasses.field(default_factory=list)
    lost: list[str] = dataclasses.field(default_factory=list)  # no answer, no status
    cancelled: int = 0  # requests the client cancelled after checking what came
    # "kind: CODE" -> count, for status codes not designed for the request
    undesigned: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    latencies: list[float] = dataclasses.field(default_factory=list)
    by_kind: dict = dataclasses.field(default_factory=lambda: collections.defaultdict(list))
    rss: list[tuple[float, int, int]] = dataclasses.field(default_factory=list)  # (s, kB, done)

    def percentile(self, p: float, values: Sequence[float] | None = None) -> float:
        values = sorted(self.latencies if values is None else values)
        if not values:
            return float("nan")
        return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]

    def summary(self) -> dict:
        """The figures of the run as plain data (JSON-ready)."""
        rss = [kb for _, kb, _ in self.rss]
        return {
            "requests": self.requests,
            "ok": self.ok,
            "examples": self.examples,
            "wrong": len(self.wrong),
            "lost": len(self.lost),
            "errors": dict(self.errors),
            "undesigned": dict(self.undesigned),
            "cancelled": self.cancelled,
            "elapsed_s": round(self.elapsed_s, 1),
            "requests_per_s": round(self.requests / self.elapsed_s, 1) if self.elapsed_s else 0,
            "p50_ms": round(self.percentile(50) * 1e3, 1),
            "p99_ms": round(self.percentile(99) * 1e3, 1),
            "by_kind": {
                k: {
                    "n": len(v),
                    "p50_ms": round(self.percentile(50, v) * 1e3, 1),
                    "p99_ms": round(self.percentile(99, v) * 1e3, 1),
                }
                for k, v in sorted(self.by_kind.items())
            },
            "rss_mib": {"start": _mib(rss[0]), "max": _mib(max(rss)), "end": _mib(rss[-1])}
            if rss
            else None,
            "first_wrong": self.wrong[:5],
            "first_lost": self.lost[:5],
        }


def _mib(kb: int) -> float:
    return round(kb / 1024, 1)


def rss_kb(pid: int) -> int | None:
    """Resident set size of a process in kB (VmRSS), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def listening_pid(port: int) -> int | None:
    """The pid of this machine's process listening on TCP `port` (same user), if any."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            cols = row.split()
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                inodes.add(f"socket:[{cols[9]}]")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return int(pid)
        except OSError:
            continue
    return None


def _send(client: AttentionClient, r: LoadRequest) -> list:
    """Send `r`; its captures (the first `cancel_after` ones, the call then cancelled)."""
    stream = client.stream(
        list(r.texts),
        what=r.what,
        layers=r.layers,
        heads=r.heads,
        dtype=r.dtype,
        codec=r.codec,
        timeout=r.timeout,
    )
    if r.cancel_after is None:
        return list(stream)
    caps = []
    try:
        for cap in stream:
            caps.append(cap)
            if len(caps) >= r.cancel_after:
                break
    finally:
        stream.close()  # cancels the call: the server drops the rest
    return caps


def run_load(
    address: str | Sequence[str],
    requests: Sequence[LoadRequest],
    expectations: Sequence[list[ExampleExpectation]],
    *,
    clients: int = 64,
    max_requests: int | None = None,
    duration: float | None = None,
    server_pid: int | None = None,
    rss_every_s: float = 1.0,
    client_options: dict | None = None,
    seed: int = 0,
    progress: Callable[[LoadResult], None] | None = None,
) -> LoadResult:
    """Send requests from `clients` threads until `max_requests` or `duration` is reached.

    Counting: every request sent is counted once, as ok (right answer), wrong
    (an answer that fails its check), an error (a status code), or lost (the
    client failed without a status; there should be none).

    Args:
      requests: the mix; `expectations[i]` is the right answer to `requests[i]`.
      server_pid: sample this process's RSS (None: no sampling).
      client_options: keyword arguments for each `AttentionClient`.
      progress: called about every 5 s with the running result.

    Returns:
      The LoadResult (every request is counted exactly once: ok, wrong, or an
      error by status code).
    """
    if max_requests is None and duration is None:
        raise UsageError("give max_requests, duration or both: a load run must be bounded")
    result = LoadResult()
    lock = threading.Lock()
    issued = [0]
    start = time.monotonic()
    stop = threading.Event()
    weights = [r.weight for r in requests]
    heavy = threading.BoundedSemaphore(HEAVY_CHECKS)

    def take() -> bool:
        with lock:
            if stop.is_set() or (max_requests is not None and issued[0] >= max_requests):
                return False
            if duration is not None and time.monotonic() - start >= duration:
                return False
            issued[0] += 1
            return True

    def client_loop(k: int) -> None:
        rng = random.Random(seed * 100_003 + k)
        # each simulated client on its own connection, as separate processes would be
        options = {"own_connection": True, **(client_options or {})}
        with AttentionClient(address, **options) as client:
            while take():
                i = rng.choices(range(len(requests)), weights)[0]
                r = requests[i]
                t0 = time.monotonic()
                try:
                    caps = _send(client, r)
                except AttentionServiceError as e:
                    with lock:
                        result.requests += 1
                        result.errors[e.code.name] += 1
                        if e.code.name not in r.designed():
                            result.undesigned[f"{r.kind}: {e.code.name}"] += 1
                    if e.code.name == "RESOURCE_EXHAUSTED":
                        time.sleep(rng.uniform(0.01, 0.1))
                    continue
                except Exception as e:  # a client bug: the answer is lost, say how
                    with lock:
                        result.requests += 1
                        result.lost.append(f"{r.kind}: {type(e).__name__}: {e}")
                    continue
                latency = time.monotonic() - t0
                expected = expectations[i]
                if r.cancel_after is not None:  # the examples before the cancel, all of them
                    expected = expected[: r.cancel_after]
                size = sum(a.nbytes for c in caps for a in c.tensors.values())
                if size > HEAVY_BYTES:
                    with heavy:
                        problem = check_answer(caps, expected)
                else:
                    problem = check_answer(caps, expected)
                examples = len(caps)
                del caps  # the answer's memory goes now, not at the next request
                with lock:
                    result.requests += 1
                    result.cancelled += r.cancel_after is not None
                    if problem:
                        result.wrong.append(f"{r.kind} {r.dtype}/{r.codec}: {problem}")
                    else:
                        result.ok += 1
                        result.examples += examples
                        result.latencies.append(latency)
                        result.by_kind[r.kind].append(latency)

    def sample() -> None:
        while not stop.is_set():
            kb = rss_kb(server_pid)
            if kb is not None:
                with lock:
                    result.rss.append((time.monotonic() - start, kb, result.requests))
            if progress is not None and len(result.rss) % max(1, int(5 / rss_every_s)) == 0:
                progress(result)
            stop.wait(rss_every_s)

    threads = [threading.Thread(target=client_loop, args=(k,), daemon=True) for k in range(clients)]
    sampler = threading.Thread(target=sample, daemon=True) if server_pid else None
    if sampler:
        sampler.start()
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    finally:
        stop.set()
        result.elapsed_s = time.monotonic() - start
        if sampler:
            sampler.join()
            kb = rss_kb(server_pid)
            if kb is not None:
                result.rss.append((result.elapsed_s, kb, result.requests))
    return result
