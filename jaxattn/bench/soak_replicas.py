"""The soak's servers: `jaxattn serve` replicas, each stopped (SIGTERM or SIGKILL) and
started again on its own port, every lifetime warmed alike and sampled from its start
(`jaxattn.bench.soak`, RELIABILITY.md "Soak")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from jaxattn.bench.soak_options import SoakOptions, log
from jaxattn.client.client import AttentionClient

JAXATTN = Path(sys.executable).with_name("jaxattn")


class Replicas:
    """`jaxattn serve` processes, each restartable on its port; logs in WORKDIR/replicaK/."""

    def __init__(self, workdir: Path, options: SoakOptions, model: Path | None, sampler, warm):
        self.workdir, self.options, self.model, self.sampler = workdir, options, model, sampler
        self.warm = warm
        self.procs: list[subprocess.Popen | None] = [None] * options.replicas
        self.ports = [0] * options.replicas
        self.lifetimes = [0] * options.replicas
        self.env = dict(os.environ, PYTHONUNBUFFERED="1", JAXATTN_TOKEN="")
        self.env.setdefault("JAXATTN_COMPILATION_CACHE", str(workdir / "jit-cache"))

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports]

    def start(self, k: int, attempts: int = 10) -> subprocess.Popen:
        """Start replica `k` on its port (a free one the first time); returns once it listens."""
        folder = self.workdir / f"replica{k}"
        folder.mkdir(parents=True, exist_ok=True)
        model = ["--model", str(self.model)] if self.model else []
        for attempt in range(attempts):
            log_path = folder / f"serve-{self.lifetimes[k]}.log"
            with open(log_path, "ab") as err:
                proc = subprocess.Popen(
                    [str(JAXATTN), "serve", *model, "--port", str(self.ports[k])]
                    + ["--grace", str(self.options.grace_s), *self.options.serve_args],
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                    env=self.env,
                    cwd=folder,
                )
            line = proc.stdout.readline()  # "listening on HOST:PORT", or EOF if it failed
            if "listening on 127.0.0.1:" in line:
                threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep draining
                self.ports[k] = int(line.split("listening on 127.0.0.1:")[1].split()[0])
                self.procs[k] = proc
                return proc
            proc.wait()
            log(f"replica {k} did not start (attempt {attempt + 1}): see {log_path}")
            time.sleep(1.0)
        raise RuntimeError(f"replica {k} did not start in {attempts} attempts: see {folder}")

    def warm_up(self, k: int, ready: bool = True) -> float:
        """Compile (or load from the cache) every shape on replica `k`: seconds taken.
        `ready`: its lifetime is ready now (a restarted one, under the load already)."""
        t0 = time.monotonic()
        if self.warm is not None:
            with AttentionClient(self.addresses[k], timeout=600) as one:
                n = self.warm(one)
            log(f"replica {k}: {n} shape warm-up requests in {time.monotonic() - t0:.1f} s")
        if ready:
            self.sampler.mark_ready(f"replica{k}")
        return round(time.monotonic() - t0, 2)

    def stop(self, k: int, sig: int) -> dict:
        """Send `sig` to replica `k` and wait for it to exit: what happened, as data."""
        proc = self.procs[k]
        self.sampler.mark_stopping(f"replica{k}")
        t0 = time.monotonic()
        proc.send_signal(sig)
        overran = False
        try:
            proc.wait(self.options.grace_s + 30)
        except subprocess.TimeoutExpired:
            overran = True
            proc.kill()
            proc.wait()
        return dict(
            pid=proc.pid,
            exit_code=proc.returncode,
            stop_s=round(time.monotonic() - t0, 2),
            overran_grace=overran,
        )

    def restart(self, k: int, sig: int) -> dict:
        event = dict(replica=k, signal=signal.Signals(sig).name, at_s=round(self.sampler.now(), 1))
        event.update(self.stop(k, sig))
        t0 = time.monotonic()
        self.lifetimes[k] += 1
        proc = self.start(k)
        self.sampler.track(f"replica{k}", proc.pid)
        event.update(new_pid=proc.pid, down_s=round(time.monotonic() - t0, 2))
        event["lifetime"] = self.lifetimes[k]
        event["warm_up_s"] = self.warm_up(k)  # as the first: every lifetime starts alike
        return event

    def close(self) -> list[dict]:
        """SIGTERM every replica at once and wait for each: what happened, as data."""
        running = [k for k, p in enumerate(self.procs) if p is not None and p.poll() is None]
        stops: dict = {}
        threads = [
            threading.Thread(target=lambda k=k: stops.__setitem__(k, self.stop(k, signal.SIGTERM)))
            for k in running
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [dict(replica=k, signal="SIGTERM", **stops[k]) for k in running]
