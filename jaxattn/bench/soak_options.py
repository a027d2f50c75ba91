"""The soak's knobs (`SoakOptions`) and its log line, shared by its parts
(`jaxattn.bench.soak` and the modules it drives)."""

from __future__ import annotations

import dataclasses
import sys
import time


@dataclasses.dataclass
class SoakOptions:
    """The soak's knobs (times in seconds). Defaults: the 2-hour run of RELIABILITY.md."""

    duration_s: float = 7200.0
    replicas: int = 3
    load_fraction: float = 0.7
    rate: float | None = None  # arrivals/s; None: load_fraction x the measured capacity
    capacity_s: float = 60.0
    capacity_clients: int = 16
    workers: int = 48
    restart_every_s: float = 600.0  # 0: no restarts
    until_restarts: int = 0  # go on past duration_s until this many restarts are done
    cancel_share: float = 0.03
    vanish_every_s: float = 10.0  # 0: no vanishing client processes
    timeout_s: float = 120.0  # each call's deadline, retries and resumes included
    grace_s: float = 30.0  # `jaxattn serve --grace`
    serve_args: tuple[str, ...] = ("--max-batch", "8")
    sample_every_s: float = 1.0
    warm_s: float = 300.0  # a lifetime's warm-up after its shapes are compiled
    baseline_s: float = 60.0  # the baseline window after it
    rss_limit: float = 1.5
    fd_tolerance: int = 16
    thread_tolerance: int = 16
    drain_wait_s: float | None = None  # after the last arrival; None: timeout_s + 30
    seed: int = 0


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)
