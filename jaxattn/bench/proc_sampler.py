"""Resident memory, open file descriptors and threads of processes, sampled every second.

    sampler = ProcSampler(every_s=1.0)
    sampler.track("replica0", pid)     # a new series: one process lifetime
    sampler.start()
    ...
    sampler.track("replica0", new_pid) # restarted: the next lifetime of "replica0"
    sampler.stop()
    sampler.series                     # [Series(name, lifetime, pid, samples), ...]
    growth(series.samples, since=t0)   # RSS / fds / threads at the start, max and end

`with ProcSampler() as sampler:` starts and stops it.

Linux only (/proc), stdlib only. A process that has exited is left out of
later samples (its series ends); reading a process this user may not read
gives no fd count (None) rather than an error.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time


@dataclasses.dataclass(frozen=True)
class Sample:
    t: float  # seconds since the sampler's origin
    rss_kb: int
    fds: int | None
    threads: int


@dataclasses.dataclass
class Series:
    """The samples of one lifetime of one named process (a restart starts the next)."""

    name: str
    lifetime: int  # 0 for the first process of this name, 1 after its first restart, ...
    pid: int
    started: float  # seconds since the sampler's origin
    ready: float | None = None  # when it began to serve (None: not known)
    samples: list[Sample] = dataclasses.field(default_factory=list)
    stopping: float | None = None  # when it was told to stop (None: never)
    ended: float | None = None  # when it was last seen (None: still alive)


def read_proc(pid: int) -> Sample | None:
    """One sample of `pid` (t = 0), or None once it has exited (or is a zombie)."""
    rss = threads = None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("Threads:"):
                    threads = int(line.split()[1])
                elif line.startswith("State:") and line.split()[1] in ("Z", "X"):
                    return None
    except OSError:
        return None
    if rss is None or threads is None:
        return None
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except PermissionError:
        fds = None
    except OSError:
        return None
    return Sample(0.0, rss, fds, threads)


class ProcSampler:
    """A daemon thread sampling every tracked process each `every_s` seconds.

    Args:
      every_s: the sampling period.
      origin: the monotonic time t = 0 of the samples (default: now).
      on_sample: called with (series, sample) after each sample (e.g. to append to a file).
    """

    def __init__(self, every_s: float = 1.0, origin: float | None = None, on_sample=None):
        self.every_s = every_s
        self.origin = time.monotonic() if origin is None else origin
        self.on_sample = on_sample
        self.series: list[Series] = []
        self._live: dict[str, Series] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def now(self) -> float:
        return time.monotonic() - self.origin

    def track(self, name: str, pid: int, ready: bool = False) -> Series:
        """Start a new series for `name` (its next lifetime), ending the previous one."""
        with self._lock:
            previous = self._live.get(name)
            if previous is not None and previous.ended is None:
                previous.ended = self.now()
            lifetime = sum(s.name == name for s in self.series)
            s = Series(name, lifetime, pid, self.now(), self.now() if ready else None)
            self.series.append(s)
            self._live[name] = s
        return s

    def mark_ready(self, name: str) -> None:
        """The current lifetime of `name` began to serve now."""
        with self._lock:
            self._live[name].ready = self.now()

    def mark_stopping(self, name: str) -> None:
        """The current lifetime of `name` is being stopped now (its later samples are
        its shutdown)."""
        with self._lock:
            self._live[name].stopping = self.now()

    def sample_once(self) -> None:
        with self._lock:
            live = [s for s in self._live.values() if s.ended is None]
        for s in live:
            got = read_proc(s.pid)
            t = self.now()
            with self._lock:
                if got is None:
                    s.ended = s.ended if s.ended is not None else t
                    continue
                sample = dataclasses.replace(got, t=round(t, 3))
                s.samples.append(sample)
            if self.on_sample is not None:
                self.on_sample(s, sample)

    def _loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.sample_once()
            next_at += self.every_s
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def start(self) -> ProcSampler:
        self._thread = threading.Thread(target=self._loop, name="proc-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling; every series still alive ends now."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            for s in self._live.values():
                if s.ended is None:
                    s.ended = self.now()

    def __enter__(self) -> ProcSampler:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def growth(samples: list[Sample], since: float = 0.0, until: float | None = None) -> dict | None:
    """Over the samples (of one series) in [since, until]: RSS start / max / end (MiB), max /
    start, and fds and threads at the start, their max and at the end; None when no sample
    is in the window. Samples without an fd count are left out of the fds (None if all)."""
    rows = [x for x in samples if x.t >= since and (until is None or x.t <= until)]
    if not rows:
        return None
    peak = max(x.rss_kb for x in rows)
    fds = [x.fds for x in rows if x.fds is not None] or [None]

    def span(values: list) -> dict:
        top = None if values[0] is None else max(values)
        return {"start": values[0], "max": top, "end": values[-1]}

    start = rows[0].rss_kb
    return {
        "samples": len(rows),
        "rss_mib": {
            "start": round(start / 1024, 1),
            "max": round(peak / 1024, 1),
            "end": round(rows[-1].rss_kb / 1024, 1),
        },
        "rss_max_over_start": round(peak / start, 3) if start else None,
        "fds": span(fds),
        "threads": span([x.threads for x in rows]),
    }
