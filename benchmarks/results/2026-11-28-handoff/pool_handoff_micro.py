"""The codec pool's hand-off alone: a Stream of N pieces (trivial work, or a CRC-32 of
512 KiB, which releases the GIL), and start()/Job.result as the client uses them.
Prints process CPU us and wall us per piece (least of R)."""

import time
import zlib

from jaxattn.wire import codec_pool as cp

N, R = 4000, 7
buf = bytes(512 << 10)
works = {"trivial": lambda k: k, "crc512k": lambda k: zlib.crc32(buf)}
for name, work in works.items():
    best = [1e9, 1e9]
    for _ in range(R):
        # give items one at a time as a sender does
        items = iter(range(N))
        s = cp.Stream(
            work,
            lambda k: cp.POOL_MIN,
            more=lambda items=items: [x for x in [next(items, None)] if x is not None],
        )
        t0, c0 = time.perf_counter(), time.process_time()
        n = 0
        while s.take() is not None:
            n += 1
        w, c = time.perf_counter() - t0, time.process_time() - c0
        s.close()
        assert n == N
        best = [min(best[0], c / N * 1e6), min(best[1], w / N * 1e6)]
    print(f"Stream {name}: {best[0]:.1f} CPU us, {best[1]:.1f} wall us a piece")
    best = [1e9, 1e9]
    for _ in range(R):
        t0, c0 = time.perf_counter(), time.process_time()
        jobs = []
        for k in range(N):
            jobs.append(cp.start(work, k, size=cp.POOL_MIN, least=0))
            if len(jobs) > 8:
                jobs.pop(0).result()
        for j in jobs:
            j.result()
        w, c = time.perf_counter() - t0, time.process_time() - c0
        best = [min(best[0], c / N * 1e6), min(best[1], w / N * 1e6)]
    print(f"start {name}: {best[0]:.1f} CPU us, {best[1]:.1f} wall us a piece")
