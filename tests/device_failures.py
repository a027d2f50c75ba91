"""Stand-ins for device outputs whose copy fails as XLA's do (running out of memory),
for the engine's out-of-memory tests (`tests/` is on sys.path)."""

from __future__ import annotations


class FailingFetch:
    """A device output in host memory (`start_copies` leaves it alone) whose fetch
    raises `error`: the failure surfaces when the host reads it."""

    sharding = type("S", (), {"memory_kind": "pinned_host"})()

    def __init__(self, error):
        self.error = error

    @property
    def addressable_shards(self):
        raise self.error
