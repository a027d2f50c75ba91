"""Many concurrent clients: every answer belongs to its own request, batches are shared."""

from __future__ import annotations

import concurrent.futures
import random

import numpy as np
from service_support import SENTENCES, WHAT, running_server

from jaxattn.client import AttentionClient

THREADS, REQUESTS = 16, 20


def request_texts(thread: int, r: int) -> list:
    rng = random.Random(thread * 1000 + r)
    texts = []
    for _ in range(rng.randint(1, 3)):
        a = rng.choice(SENTENCES)
        texts.append((a, rng.choice(SENTENCES)) if rng.random() < 0.3 else a)
    return texts


def test_16_threads_x_20_requests_each_get_their_own_answers(svc_engine):
    plans = {(t, r): request_texts(t, r) for t in range(THREADS) for r in range(REQUESTS)}
    unique = sorted({x for texts in plans.values() for x in texts}, key=str)
    reference = dict(zip(unique, svc_engine.capture(unique, what=WHAT), strict=True))

    with running_server(svc_engine, batch_window_s=0.01) as (server, address):
        with AttentionClient(address, timeout=60) as client:

            def worker(thread: int) -> int:
                checked = 0
                for r in range(REQUESTS):
                    texts = plans[thread, r]
                    caps = client.capture(texts, what=WHAT, codec=("none", "zstd")[r % 2])
                    assert len(caps) == len(texts)
                    for text, cap in zip(texts, caps, strict=True):
                        want = reference[text]
                        assert cap.tokens == want.tokens, (thread, r, text)
                        for name in WHAT:
                            np.testing.assert_allclose(
                                cap.array(name), want.array(name), rtol=1e-5, atol=1e-6
                            )
                        checked += 1
                return checked

            with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
                counts = list(pool.map(worker, range(THREADS)))

        stats = server.batcher.stats
        assert sum(counts) == sum(len(t) for t in plans.values())
        assert stats["jobs"] == THREADS * REQUESTS
        # Requests really shared batches. How many depends on timing (16 threads, a
        # 10 ms window, the engine's speed): half is typical, 2/3 leaves room for a
        # busy machine while still failing if no request ever joins another.
        assert stats["batches"] < stats["jobs"] * 2 / 3, stats
        assert server.batcher.admitted == 0
