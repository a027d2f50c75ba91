"""What the batcher's layer-group tests on fake engines share (test_service_layer_groups_nested.py,
test_service_layer_groups_preempt.py): the sizes, a text of a given length, a bounded wait, a
reader thread that reads a client's calls one after another, and the end-of-test check that
every byte and reservation came back."""

from __future__ import annotations

import threading
import time
import types

import numpy as np

GROUP = 1000  # bytes of one layer group of a long example
GROUPS = 3
SMALL = 100  # bytes of a short example (one Capture)
BUFFER = 1500  # a call's unsent results: one group, not two
LONG, SHORT = 7, 3  # token lengths: a long example runs in groups, a short one whole
LIMIT = 10.0  # seconds a reader may take before a test calls it a deadlock


def text(name, length=LONG):
    return types.SimpleNamespace(name=name, length=length)


def wait_until(condition, timeout=LIMIT):
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


class Reader(threading.Thread):
    """Reads whole calls one after another (a client with one thread for several calls),
    recording (call, index, part) and each example's bytes, or the exception that ended
    each call; `pause` s after each item (a slow reader)."""

    def __init__(self, *named_results, pause=0.0):
        super().__init__(daemon=True)
        self.named_results, self.pause = named_results, pause
        self.got: list = []
        self.data: dict[tuple[str, int], list] = {}
        self.errors: dict[str, Exception] = {}
        self.start()

    def run(self):
        for name, results in self.named_results:
            try:
                for index, cap in results:
                    self.got.append((name, index, getattr(cap, "part", None)))
                    self.data.setdefault((name, index), []).append(cap.tensors["attention"])
                    time.sleep(self.pause)
            except Exception as e:
                self.errors[name] = e

    def finished(self, timeout=LIMIT) -> bool:
        self.join(timeout)
        return not self.is_alive()

    def example(self, name, index) -> np.ndarray:
        """The bytes of one example as its reader got them, its parts joined."""
        return np.concatenate(self.data[(name, index)])


def finish(batcher, *jobs):
    """Release the jobs; then nothing is admitted, reserved or buffered."""
    for job in jobs:
        batcher.release(job)
    assert batcher.admitted == 0 and batcher.reserved_bytes == 0
    assert batcher.buffered_bytes == 0
    assert all(job.buffered == 0 for job in jobs), [job.buffered for job in jobs]
