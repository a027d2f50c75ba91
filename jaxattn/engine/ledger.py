"""What an engine has compiled, and the padding it has paid to avoid compiling more.

The planner's memory (`jaxattn.engine.batching`, the ski-rental rule): the
(program, length, batch size) shapes compiled, the padded tokens paid per shape
not compiled, and the programs warmed one size per bucket, whose part-filled
batches pad into compiled sizes (`Engine.warmup(spec, sizes="largest")`).
"""

from __future__ import annotations


class ShapeLedger:
    """An engine's memory for the planner: the (key, length, size) shapes it has
    compiled (key: the program, e.g. the capture spec and whether heads are
    ablated), and the padded tokens paid so far, per shape not compiled, to avoid
    compiling it (the ski-rental rent, module doc). It knows this process's
    compiles only: a shape the persistent cache holds still counts as a compile."""

    def __init__(self):
        self.compiled: set[tuple] = set()
        self.rent: dict[tuple, int] = {}
        # Programs (keys) warmed one size per bucket: remainders pad into compiled sizes.
        self.pad_into: set = set()

    def knows(self, key, length: int, size: int) -> bool:
        """Whether the shape (key, length, size) is compiled."""
        return (key, length, size) in self.compiled

    def add(self, key, length: int, size: int) -> None:
        """Record that the shape (key, length, size) is compiled (its rent is settled)."""
        self.compiled.add((key, length, size))
        self.rent.pop((key, length, size), None)

    def may_rent(self, key, length: int, avoided: int, tokens: int, limit: int) -> bool:
        """Whether `tokens` more padding may be paid to avoid compiling batch size
        `avoided`: while that shape is not compiled and its rent stays within `limit`."""
        shape = (key, length, avoided)
        return shape not in self.compiled and self.rent.get(shape, 0) + tokens <= limit

    def charge(self, key, batch) -> None:
        """Charge the rent of a `batching.Batch` that runs (its `rent`; nothing when None)."""
        if batch.rent is not None:
            avoided, tokens = batch.rent
            shape = (key, batch.length, avoided)
            self.rent[shape] = self.rent.get(shape, 0) + tokens
