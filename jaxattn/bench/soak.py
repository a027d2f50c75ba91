"""A soak of the service: replicas restarted under open-loop load, clients that vanish.

    from jaxattn.bench.soak import SoakOptions, run_soak
    figures = run_soak(workdir, mix, expectations, SoakOptions(duration_s=7200), model=path)

What it does (RELIABILITY.md, "Soak"; the command is `benchmarks/soak.py`):

1. starts `options.replicas` `jaxattn serve` processes on free loopback ports, one
   compilation cache shared by all (and by their restarts);
2. measures capacity: a closed-loop burst of `capacity_clients` threads sending the
   mix as fast as they are answered for `capacity_s` seconds (requests/s);
3. runs open loop for `duration_s`: Poisson arrivals at `load_fraction` of that
   capacity, each handed to one of `workers` threads (each its own `AttentionClient`
   of every address, on its own connections); a share `cancel_share` of the
   arrivals are streams of several examples the caller closes part-way (an
   in-process cancel mid-stream); every `vanish_every_s` seconds a short-lived
   client process (`jaxattn.bench.soak_client`) is SIGKILLed mid-call; every
   `restart_every_s` one replica (in turn) is stopped, alternately with SIGTERM
   (graceful drain) and SIGKILL, and started again on the same port;
4. samples every second the RSS, open fds and threads of each replica (a restart
   starts a new series) and of this process (`jaxattn.bench.proc_sampler`), into
   WORKDIR/samples.csv as it goes;
5. judges the run (`jaxattn.bench.soak_report`).

Its parts: the knobs (`soak_options`), the replicas (`soak_replicas`), the vanishing
clients (`soak_vanishers`, each a `soak_client` process), the verdict
(`soak_report`); this module holds the load, the checking and the run.

Accounting: an arrival is *sent* when a worker starts its call, and ends as
exactly one of: right (every example checked), wrong, cancelled (by its own
caller, after checking the examples it read), refused with a status code, or
*lost*: the client failed without a status, or the call had not ended when the
run stopped waiting for it.

Checking: every received example is compared with its expectation
(`jaxattn.bench.expect.check_capture`: float32 bit for bit, the other dtypes within
their documented error) unless its bytes are identical to an answer for the same
example that passed that comparison before: header fields and a BLAKE2b digest of
every tensor's bytes (as received, before dequantising) are kept for each right
example, so each answer is either fully compared or byte-identical to one that was.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import os
import queue
import random
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from jaxattn.bench.expect import ExampleExpectation, check_capture
from jaxattn.bench.load_generator import LoadRequest
from jaxattn.bench.proc_sampler import ProcSampler
from jaxattn.bench.soak_options import SoakOptions, log
from jaxattn.bench.soak_replicas import Replicas
from jaxattn.bench.soak_report import DESIGNED, judge
from jaxattn.bench.soak_vanishers import Vanishers
from jaxattn.client.client import AttentionClient
from jaxattn.client.errors import AttentionServiceError

CALL_FIELDS = ("what", "layers", "heads", "dtype", "codec")  # a LoadRequest's call options


# -- checking ---------------------------------------------------------------------------


class Checker:
    """Every example compared with its expectation, or byte-identical to one that was."""

    def __init__(self, expectations: Sequence[list[ExampleExpectation]]):
        self.expectations = expectations
        self.known: set = set()
        self.compared = 0  # examples compared in full
        self.identical = 0  # examples byte-identical to one compared before
        self._lock = threading.Lock()

    @staticmethod
    def _key(i: int, j: int, cap) -> tuple:
        parts = [i, j, cap.dtype, tuple(cap.tokens), cap.sentence_b_start]
        parts += [tuple(cap.layers), tuple(cap.heads)]
        for name in sorted(cap.tensors):
            encoded, scale, offset = cap.encoded(name)
            # as bytes: a bfloat16 array has no buffer format of its own
            data = np.ascontiguousarray(encoded).reshape(-1).view(np.uint8)
            digest = hashlib.blake2b(data, digest_size=16).digest()
            parts += [name, encoded.shape, str(encoded.dtype), scale, offset, digest]
        return tuple(parts)

    def example(self, i: int, j: int, cap) -> str | None:
        """None when `cap` is the right answer to example `j` of mix entry `i`."""
        expected = self.expectations[i]
        if j >= len(expected):
            return f"example {j}: more examples answered than the {len(expected)} asked"
        key = self._key(i, j, cap)
        with self._lock:
            if key in self.known:
                self.identical += 1
                return None
        problem = check_capture(cap, expected[j])
        if problem is not None:
            return f"example {j}: {problem}"
        with self._lock:
            self.known.add(key)
            self.compared += 1
        return None

    def answer(self, i: int, caps) -> str | None:
        if len(caps) != len(self.expectations[i]):
            return f"{len(caps)} examples answered, {len(self.expectations[i])} asked"
        for j, cap in enumerate(caps):
            problem = self.example(i, j, cap)
            if problem:
                return problem
        return None


# -- the load -----------------------------------------------------------------------------


@dataclasses.dataclass
class Tally:
    """Outcomes of the arrivals of one phase (every sent arrival counted once)."""

    arrived: int = 0  # open loop: arrivals drawn (sent once a worker takes them)
    sent: int = 0
    right: int = 0
    cancelled: int = 0  # closed part-way by its caller, the examples read all right
    examples: int = 0
    wrong: list = dataclasses.field(default_factory=list)
    lost: list = dataclasses.field(default_factory=list)
    statuses: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    latencies: list = dataclasses.field(default_factory=list)  # from the arrival's time
    in_flight: int = 0

    def summary(self) -> dict:
        lat = sorted(self.latencies)

        def pct(p: float) -> float | None:
            if not lat:
                return None
            return round(lat[min(len(lat) - 1, int(round(p / 100 * (len(lat) - 1))))] * 1e3, 1)

        return dict(
            sent=self.sent,
            right=self.right,
            cancelled_by_caller=self.cancelled,
            examples_checked=self.examples,
            wrong=len(self.wrong),
            lost=len(self.lost),
            statuses=dict(self.statuses),
            undesigned_statuses={k: v for k, v in self.statuses.items() if k not in DESIGNED},
            p50_ms=pct(50),
            p99_ms=pct(99),
            first_wrong=self.wrong[:5],
            first_lost=self.lost[:5],
        )


class Load:
    """Sends mix entries from worker threads, each with its own client; counts outcomes."""

    def __init__(self, addresses, mix: Sequence[LoadRequest], checker: Checker, options, seed):
        self.addresses, self.mix, self.checker, self.options = addresses, mix, checker, options
        self.weights = [r.weight for r in mix]
        self.multi = [i for i, r in enumerate(mix) if len(r.texts) > 1]
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.local = threading.local()
        self.clients: list[AttentionClient] = []

    def client(self) -> AttentionClient:
        c = getattr(self.local, "client", None)
        if c is None:
            c = AttentionClient(self.addresses, timeout=self.options.timeout_s, own_connection=True)
            self.local.client = c
            with self.lock:
                self.clients.append(c)
        return c

    def draw(self) -> tuple[int, int | None]:
        """(mix index, examples to read before closing, or None to read all)."""
        with self.lock:
            if self.multi and self.rng.random() < self.options.cancel_share:
                i = self.rng.choices(self.multi, [self.weights[k] for k in self.multi])[0]
                return i, self.rng.randint(1, len(self.mix[i].texts) - 1)
            return self.rng.choices(range(len(self.mix)), self.weights)[0], None

    def send(self, tally: Tally, i: int, read: int | None, arrived: float) -> None:
        r = self.mix[i]
        with self.lock:
            tally.sent += 1
            tally.in_flight += 1
        outcome, detail, n = "right", None, 0
        try:
            it = self.client().stream(list(r.texts), **{f: getattr(r, f) for f in CALL_FIELDS})
            if read is None:
                caps = list(it)
                detail, n = self.checker.answer(i, caps), len(caps)
            else:
                for j, cap in enumerate(it):
                    detail, n = self.checker.example(i, j, cap), j + 1
                    if detail or n == read:
                        break
                it.close()  # cancels the call: the server drops the rest
                outcome = "cancelled"
                if not detail and n < read:
                    detail = f"the stream ended after {n} of {len(r.texts)} examples"
            if detail:
                outcome = "wrong"
        except AttentionServiceError as e:
            outcome, detail = "status", e.code.name
        except Exception as e:  # a client failure without a status: lost
            outcome, detail = "lost", f"{type(e).__name__}: {e}"
        latency = time.monotonic() - arrived
        with self.lock:
            tally.in_flight -= 1
            if outcome == "right":
                tally.right += 1
                tally.examples += n
                tally.latencies.append(latency)
            elif outcome == "cancelled":
                tally.cancelled += 1
                tally.examples += n
            elif outcome == "wrong":
                tally.wrong.append(f"{r.kind} {r.dtype}/{r.codec}: {detail}")
            elif outcome == "status":
                tally.statuses[detail] += 1
            else:
                tally.lost.append(f"{r.kind} {r.dtype}/{r.codec}: {detail}")
        if outcome == "status" and detail == "RESOURCE_EXHAUSTED":
            time.sleep(0.05)

    def closed_loop(self, clients: int, seconds: float) -> tuple[Tally, float]:
        """Each of `clients` threads sends as soon as its last call ended: (tally, elapsed)."""
        tally, end = Tally(), time.monotonic() + seconds

        def loop() -> None:
            while time.monotonic() < end:
                with self.lock:
                    i = self.rng.choices(range(len(self.mix)), self.weights)[0]
                self.send(tally, i, None, time.monotonic())

        start = time.monotonic()
        threads = [threading.Thread(target=loop, daemon=True) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return tally, time.monotonic() - start

    def open_loop(self, tally, rate: float, stop: threading.Event, backlog):
        """Poisson arrivals at `rate`/s until `stop`, served by `options.workers` threads.

        Returns the workers once the arrivals end (`tally.arrived` counts them); the
        caller waits for them to finish.
        """
        work: queue.Queue = queue.Queue()

        def worker() -> None:
            while True:
                item = work.get()
                if item is None:
                    return
                self.send(tally, *item)

        workers = [
            threading.Thread(target=worker, daemon=True) for _ in range(self.options.workers)
        ]
        for t in workers:
            t.start()
        arrivals = random.Random(self.rng.random())
        next_at = time.monotonic()
        while True:
            next_at += arrivals.expovariate(rate)
            if stop.wait(max(0.0, next_at - time.monotonic())):
                break
            i, read = self.draw()
            work.put((i, read, next_at))
            tally.arrived += 1
            backlog.append(work.qsize())
        for _ in workers:
            work.put(None)
        return workers

    def close(self) -> None:
        for c in self.clients:
            with contextlib.suppress(Exception):
                c.close()


# -- clients that vanish ------------------------------------------------------------------


# -- the run ------------------------------------------------------------------------------


def run_soak(
    workdir: Path,
    mix: Sequence[LoadRequest],
    expectations: Sequence[list[ExampleExpectation]] | Callable[[], Sequence],
    options: SoakOptions,
    *,
    model: Path | None = None,
    warm: Callable[[AttentionClient], int] | None = None,
    stop_early: threading.Event | None = None,
) -> dict:
    """Run the soak (module docstring); returns its figures, verdicts included.

    Args:
      mix, expectations: the requests and their right answers (`expectations[i]`
        answers `mix[i]`; `jaxattn.bench.expect.build_expectations` with the
        replicas' --max-batch), or a function returning them (called while the
        replicas start).
      model: `jaxattn serve --model` (None: the embedded MiniLM).
      warm: called with a client of each replica when it starts listening (the
        first ones before the load, restarted ones under it), to compile its
        shapes (restarted replicas find them in the shared compilation cache).
      stop_early: set it (from a signal handler) to end the arrivals now; the run
        then waits for its calls and is judged as usual.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    csv = open(workdir / "samples.csv", "w", buffering=1)  # noqa: SIM115 (closed below)
    csv.write("name,lifetime,pid,t_s,rss_kb,fds,threads\n")

    def write(series, s) -> None:
        csv.write(
            f"{series.name},{series.lifetime},{series.pid},{s.t},{s.rss_kb},{s.fds},{s.threads}\n"
        )

    sampler = ProcSampler(options.sample_every_s, on_sample=write)
    replicas = Replicas(workdir, options, model, sampler, warm)
    figures: dict = dict(
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        machine=f"{os.cpu_count()} CPUs, {os.uname().machine}, kernel {os.uname().release}",
        load_average_before=" ".join(Path("/proc/loadavg").read_text().split()[:3]),
        model=str(model or "the embedded all-MiniLM-L6-v2"),
        options=dataclasses.asdict(options),
        mix=dict(collections.Counter(r.kind for r in mix)),
    )
    restarts: list[dict] = []
    load = None
    try:
        log(f"starting {options.replicas} replicas in {workdir}")
        procs = [None] * options.replicas
        threads = [
            threading.Thread(target=lambda k=k: procs.__setitem__(k, replicas.start(k)))
            for k in range(options.replicas)
        ]
        for t in threads:
            t.start()
        if callable(expectations):  # computed while the replicas start
            expectations = expectations()
        for t in threads:
            t.join()
        if any(p is None for p in procs):
            raise RuntimeError(f"a replica did not start: see {workdir}/replica*/serve-0.log")
        addresses = replicas.addresses
        log(f"replicas at {', '.join(addresses)}")
        for k, proc in enumerate(procs):
            sampler.track(f"replica{k}", proc.pid)
        sampler.track("driver", os.getpid())
        sampler.start()
        for k in range(options.replicas):
            replicas.warm_up(k, ready=False)

        checker = Checker(expectations)
        load = Load(addresses, mix, checker, options, options.seed)
        if options.rate is None:
            log(
                f"capacity: {options.capacity_clients} clients, closed loop, {options.capacity_s} s"
            )
            tally, elapsed = load.closed_loop(options.capacity_clients, options.capacity_s)
            capacity = tally.sent / elapsed
            figures["capacity"] = dict(
                clients=options.capacity_clients,
                seconds=round(elapsed, 1),
                requests_per_s=round(capacity, 2),
                **tally.summary(),
            )
            rate = options.load_fraction * capacity
            log(f"capacity {capacity:.1f} requests/s; soak at {rate:.1f}/s")
        else:
            rate = options.rate
        figures["rate_per_s"] = round(rate, 3)

        stop, backlog = threading.Event(), []
        enough = threading.Event()  # the arrivals go on until duration_s and until_restarts
        vanishers = Vanishers(addresses, mix, options.vanish_every_s, options.seed + 7)
        soak_start = time.monotonic()
        figures["soak_started_s"] = round(sampler.now(), 1)

        def restarter() -> None:
            k = 0
            next_at = soak_start + options.restart_every_s
            while not enough.wait(max(0.0, next_at - time.monotonic())):
                past = time.monotonic() - soak_start >= options.duration_s
                if past and len(restarts) >= options.until_restarts:
                    break  # the arrivals are ending: no restart they would not see
                sig = signal.SIGTERM if k % 2 == 0 else signal.SIGKILL
                slot = k % options.replicas
                log(f"restart {k + 1}: replica {slot} by {signal.Signals(sig).name}")
                try:
                    event = replicas.restart(slot, sig)
                except Exception as e:
                    event = dict(replica=slot, signal=signal.Signals(sig).name, error=str(e))
                restarts.append(event)
                log(f"restart {k + 1}: {event}")
                k += 1
                next_at = max(next_at + options.restart_every_s, time.monotonic())

        def progress(tally: Tally) -> None:
            while not stop.wait(30.0):
                rss = ", ".join(
                    f"{s.name}#{s.lifetime} {s.samples[-1].rss_kb // 1024} MiB"
                    for s in sampler.series
                    if s.ended is None and s.samples
                )
                log(
                    f"{tally.sent} sent, {tally.right} right, {tally.cancelled} cancelled, "
                    f"{len(tally.wrong)} wrong, {len(tally.lost)} lost, {dict(tally.statuses)}; "
                    f"backlog {backlog[-1] if backlog else 0}; {rss}"
                )

        helpers = []
        if options.restart_every_s > 0:
            helpers.append(threading.Thread(target=restarter, daemon=True))
        tally = Tally()
        helpers.append(threading.Thread(target=progress, args=(tally,), daemon=True))
        if options.vanish_every_s > 0:
            vanishers.start()
        # A lifetime is ready once its shapes are compiled and the open loop reaches it:
        # the first ones (and the driver) now, a restarted one when its warm-up is done.
        for name in [s.name for s in sampler.series if s.ended is None]:
            sampler.mark_ready(name)
        for h in helpers:
            h.start()

        def until() -> None:
            early = stop_early or threading.Event()
            end = soak_start + options.duration_s
            while time.monotonic() < end or len(restarts) < options.until_restarts:
                if early.wait(0.1):
                    log("stopped early")
                    figures["stopped_early"] = True
                    break
            enough.set()

        threading.Thread(target=until, daemon=True).start()
        workers = load.open_loop(tally, rate, enough, backlog)
        arrivals_end = time.monotonic()
        log(f"arrivals ended after {arrivals_end - soak_start:.1f} s; waiting for the calls")
        stop.set()
        for h in helpers:
            h.join()
        figures["vanishing_clients"] = vanishers.close() if options.vanish_every_s > 0 else {}
        wait = options.drain_wait_s if options.drain_wait_s is not None else options.timeout_s + 30
        for t in workers:
            t.join(max(0.0, arrivals_end + wait - time.monotonic()))
        log(f"calls ended {time.monotonic() - arrivals_end:.1f} s after the last arrival")
        with load.lock:
            for _ in range(tally.in_flight):
                tally.lost.append(f"no end within {wait:.0f} s of the last arrival")
        figures["soak"] = dict(
            seconds=round(arrivals_end - soak_start, 1),
            rate_per_s=round(rate, 3),
            achieved_per_s=round(tally.sent / max(1e-9, arrivals_end - soak_start), 2),
            backlog_max=max(backlog, default=0),
            backlog_mean=round(sum(backlog) / len(backlog), 2) if backlog else 0,
            never_started=tally.arrived - tally.sent,
            **tally.summary(),
        )
        figures["checks"] = dict(compared=checker.compared, byte_identical=checker.identical)
    finally:
        # The replicas drain with their clients still connected, as in a restart; then
        # the clients close. (The other order can hang `jaxattn serve`'s drain: RELIABILITY.md,
        # "Soak", found.)
        figures["final_stops"] = replicas.close()
        log("replicas stopped")
        if load is not None:
            load.close()
        sampler.stop()
        csv.close()
        figures["restarts"] = restarts
    figures["series"] = [dataclasses.asdict(s) for s in sampler.series]
    figures["verdict"] = judge(figures, options)
    return figures
