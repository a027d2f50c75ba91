"""Three `jaxattn serve` processes, one SIGKILLed under concurrent clients: nothing lost.

Every request is answered once and right: each example equal, bit for bit, to
an uninterrupted float32 capture of the same request from a replica before the
kill (the servers run batches of one example, `--max-batch 1`, so every example
is computed by the same program wherever it goes; the numbers themselves are
checked against the engine and torch elsewhere). In-process replicas and the
resume itself: tests/service/test_replicas.py. docs/replicas.md.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from service_support import SENTENCES
from test_service_subprocess import launch

from jaxattn.client import AttentionClient

# Sentences of at most 8 tokens: one bucket, so one compile per process.
SHORT = (SENTENCES[0], *SENTENCES[3:5], *SENTENCES[7:9])
CLIENTS = 6
REQUESTS = 8  # per client, each of 4 texts
WHAT = ("attention",)


@pytest.mark.slow  # three processes start (most of its time)
def test_a_replica_killed_mid_run_loses_no_request(svc_checkpoint, tmp_path):
    dirs = [tmp_path / f"replica{i}" for i in range(3)]
    for d in dirs:
        d.mkdir()
    with ThreadPoolExecutor(3) as pool:
        procs = list(
            pool.map(lambda d: launch(svc_checkpoint, d, "--max-batch", "1", "--grace", "1"), dirs)
        )
    requests = [[SHORT[(k + j) % len(SHORT)] for j in range(4)] for k in range(len(SHORT))]
    try:
        addresses = [address for _, address, _ in procs]
        with AttentionClient(addresses[2], timeout=60) as one:
            uninterrupted = [one.capture(texts, what=WHAT) for texts in requests]
        answered: list = []
        wrong: list = []
        failed: list = []
        lock = threading.Lock()
        enough = threading.Event()  # a third of the requests answered: time to kill one

        def client(c: int) -> None:
            with AttentionClient(addresses, timeout=60) as cl:
                for r in range(REQUESTS):
                    k = (c + r) % len(requests)
                    try:
                        caps = cl.capture(requests[k], what=WHAT)
                    except Exception as e:
                        with lock:
                            failed.append(repr(e))
                        continue
                    problem = differs(caps, uninterrupted[k])
                    with lock:
                        answered.append((c, r))
                        if problem:
                            wrong.append(problem)
                        if len(answered) >= CLIENTS * REQUESTS // 3:
                            enough.set()

        threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
        for t in threads:
            t.start()
        assert enough.wait(120), failed
        procs[0][0].kill()  # SIGKILL: no drain, connections reset mid-stream
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
        assert failed == [] and wrong == []
        assert sorted(answered) == [(c, r) for c in range(CLIENTS) for r in range(REQUESTS)]
        assert procs[0][0].wait(10) == -9
    finally:
        for proc, _, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def differs(got, want) -> str | None:
    """None when `got` are `want`, example by example, bit for bit; else what differs."""
    if [c.text for c in got] != [c.text for c in want]:
        return f"texts {[c.text for c in got]} != {[c.text for c in want]}"
    for g, w in zip(got, want, strict=True):
        if g.tokens != w.tokens or not np.array_equal(g.attention, w.attention):
            return f"{g.text!r}: not the uninterrupted capture"
    return None
