import collections
import sys

for path in sys.argv[1:]:
    c = collections.Counter()
    for line in open(path):
        stack, n = line.rstrip().rsplit(" ", 1)
        n = int(n)
        if not any(
            k in stack
            for k in (
                "main.<locals>.drain",
                "prefetch.<locals>.produce",
                "_worker (concurrent",
                "_Threads._serve",
                "MicroBatcher._loop",
            )
        ):
            continue
        c["all"] += n
        if "_packed" in stack or "compress" in stack:
            c["codec work"] += n
        elif "concurrent/futures" in stack or "codec_pool.py" in stack:
            c["pool hand-off"] += n
        elif "prefetch" in stack and (
            "put" in stack.rsplit(";", 3)[-1]
            or "Queue" in stack
            or "release" in stack
            or "notify" in stack
        ):
            c["prefetch hand-off"] += n
        elif "notify" in stack:
            c["other notify"] += n
    print(path, dict(c))
