"""Per-second samples of processes' memory, open file descriptors and threads.

    from jaxattn.bench.proc_sample import ProcessSampler, growth
    with ProcessSampler({"replica 0": pid0, "load generator": pid1}) as sampler:
        ...                                      # one sample of each, every second
        sampler.mark("measuring")                # an event, on the same clock
    figures = growth(sampler.samples, since=sampler.events["measuring"])

Each sample is (seconds since the start, name, RSS in kB (VmRSS), open file
descriptors (entries of /proc/PID/fd), threads (Threads: of /proc/PID/status));
a process that is gone is no longer sampled. Linux /proc only; stdlib only.
The processes may live in other network namespaces: /proc is the machine's.
"""

from __future__ import annotations

import os
import threading
import time


def sample(pid: int) -> tuple[int, int, int] | None:
    """(RSS kB, open fds, threads) of a process now, or None once it is gone."""
    rss = threads = None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("Threads:"):
                    threads = int(line.split()[1])
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError):
        return None
    if rss is None or threads is None:  # a zombie: no memory left to count
        return None
    return rss, fds, threads


class ProcessSampler:
    """Samples `pids` (name -> pid) every `every_s` seconds in a thread of its own.

    Attributes:
      samples: (t, name, rss_kb, fds, threads), t in seconds since the start.
      events: name -> t, from `mark`.
    """

    def __init__(self, pids: dict[str, int], every_s: float = 1.0):
        self.pids = dict(pids)
        self.every_s = every_s
        self.samples: list[tuple[float, str, int, int, int]] = []
        self.events: dict[str, float] = {}
        self._start = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="proc-sampler", daemon=True)

    def now(self) -> float:
        return time.monotonic() - self._start

    def add(self, name: str, pid: int) -> None:
        """Sample one more process from now on."""
        self.pids[name] = pid

    def mark(self, event: str) -> float:
        """Record that `event` happens now (first time only); its time."""
        return self.events.setdefault(event, self.now())

    def sample_now(self) -> None:
        t = self.now()
        for name, pid in list(self.pids.items()):
            got = sample(pid)
            if got is not None:
                self.samples.append((t, name, *got))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample_now()
            self._stop.wait(self.every_s)

    def start(self) -> ProcessSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling, after one last sample of each process still there."""
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
            self.sample_now()

    def __enter__(self) -> ProcessSampler:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def growth(samples, since: float = 0.0, until: float | None = None) -> dict:
    """Per name, over the samples in [since, until]: RSS start / max / end (MiB), max / start,
    and fds and threads at the start, their max and at the end."""
    out: dict = {}
    for name in dict.fromkeys(s[1] for s in samples):
        rows = [s for s in samples if s[1] == name and s[0] >= since]
        rows = [s for s in rows if until is None or s[0] <= until]
        if not rows:
            continue
        first, last = rows[0], rows[-1]
        peak = max(s[2] for s in rows)
        out[name] = {
            "samples": len(rows),
            "rss_mib": {
                "start": round(first[2] / 1024, 1),
                "max": round(peak / 1024, 1),
                "end": round(last[2] / 1024, 1),
            },
            "rss_max_over_start": round(peak / first[2], 3) if first[2] else None,
            "fds": {"start": first[3], "max": max(s[3] for s in rows), "end": last[3]},
            "threads": {"start": first[4], "max": max(s[4] for s in rows), "end": last[4]},
        }
    return out
