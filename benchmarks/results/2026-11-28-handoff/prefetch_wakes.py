"""send_drain with the prefetch hand-off's wake-ups counted (a release that wakes a
sleeping thread): base (queue.Queue: Condition.notify with a waiter, by the caller),
new (prefetch's own locks: has_item / has_room releases). argv as send_drain's."""

import collections
import sys
import threading
import types

sys.argv[0] = "benchmarks/send_drain.py"
sys.path.insert(0, "benchmarks")
counts = collections.Counter()
import service.prefetch as pf  # noqa: E402 - after the path set above

if hasattr(pf, "queue"):  # base
    import queue

    marked = {}

    class CountingQueue(queue.Queue):
        def __init__(self, *a):
            super().__init__(*a)
            self.not_empty._role = "consumer woken"
            self.not_full._role = "producer woken"

    pf.queue = types.SimpleNamespace(Queue=CountingQueue, Full=queue.Full)
    real = threading.Condition.notify

    def notify(self, n=1):
        if self._waiters and hasattr(self, "_role"):
            counts[self._role] += 1
        return real(self, n)

    threading.Condition.notify = notify
else:
    made = []

    class Counted:
        def __init__(self):
            self._l = threading.Lock()
            made.append(self)
            self.k = len(made) % 3

        def acquire(self, *a, **k):
            return self._l.acquire(*a, **k)

        def release(self):
            if self.k == 2:
                counts["consumer woken"] += 1
            elif self.k == 0:
                counts["producer woken"] += 1
            self._l.release()

        __enter__ = acquire

        def __exit__(self, *e):
            self.release()

    pf.threading = types.SimpleNamespace(
        Lock=Counted, Event=threading.Event, Thread=threading.Thread
    )
import send_drain  # noqa: E402 - after the patching above

send_drain.main(sys.argv[1:])
n = int(sys.argv[sys.argv.index("--repeats") + 1]) + 1  # repeats + the first drain
print("per drain:", {k: round(v / n, 1) for k, v in counts.items()})
