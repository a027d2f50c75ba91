"""The soak's vanishing clients: short-lived processes (`jaxattn.bench.soak_client`), each
making one call and SIGKILLed mid-way, so the servers see a peer disappear without a
cancel (`jaxattn.bench.soak`, RELIABILITY.md "Soak")."""

from __future__ import annotations

import collections
import json
import queue
import random
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from jaxattn.bench.load_generator import LoadRequest


class Vanishers:
    """Every `every_s` seconds a client process makes one call and is SIGKILLed mid-way.

    Alternately killed once its first example arrived (mid-stream) and at a random
    moment 0-1 s after it started its call (queued, computing or streaming).
    """

    def __init__(self, addresses, mix: Sequence[LoadRequest], every_s: float, seed: int):
        self.addresses, self.every_s = addresses, every_s
        multi = [r for r in mix if len(r.texts) > 1 and r.what == ("attention",)]
        self.requests = multi or list(mix)
        self.rng = random.Random(seed)
        self.counts: collections.Counter = collections.Counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="vanishers", daemon=True)

    def _one(self, k: int) -> None:
        r = self.rng.choice(self.requests)
        job = dict(
            addresses=self.addresses,
            texts=[t if isinstance(t, str) else list(t) for t in r.texts],
            what=list(r.what),
            dtype=r.dtype,
            codec=r.codec,
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "jaxattn.bench.soak_client"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        lines: queue.Queue = queue.Queue()
        threading.Thread(
            target=lambda: [lines.put(x.strip()) for x in proc.stdout], daemon=True
        ).start()
        proc.stdin.write(json.dumps(job))
        proc.stdin.close()
        mid_stream = k % 2 == 0
        wait_for = "example" if mid_stream else "calling"
        deadline, seen = time.monotonic() + 60, []
        while time.monotonic() < deadline and not self.stop.is_set():
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                if proc.poll() is not None:
                    break
                continue
            seen.append(line)
            if line.startswith(wait_for) or line in ("done",) or line.startswith("error"):
                break
        if not mid_stream and seen and seen[-1] == "calling":
            time.sleep(self.rng.uniform(0.0, 1.0))
        proc.kill()
        proc.wait()
        while not lines.empty():
            seen.append(lines.get())
        last = seen[-1] if seen else ""
        if last == "done":
            self.counts["finished before the kill"] += 1
        elif last.startswith("error"):
            self.counts[f"ended with {last}"] += 1
        elif last.startswith("example"):
            self.counts["killed mid-stream"] += 1
        elif last == "calling":
            self.counts["killed before its first example"] += 1
        else:
            self.counts["killed before calling"] += 1

    def _loop(self) -> None:
        k = 0
        while not self.stop.wait(self.rng.uniform(0.5, 1.5) * self.every_s):
            try:
                self._one(k)
            except Exception as e:  # never stop the soak over it; count it
                self.counts[f"driver error {type(e).__name__}"] += 1
            k += 1

    def start(self) -> None:
        self.thread.start()

    def close(self) -> dict:
        self.stop.set()
        self.thread.join()
        return dict(self.counts)
