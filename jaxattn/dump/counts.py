"""What a dump did (or what a store holds), and the job's final summary line."""

from __future__ import annotations

import dataclasses

from jaxattn.progress import human_bytes


@dataclasses.dataclass
class Counts:
    """What a process did (or what a store holds)."""

    examples: int = 0
    skipped: int = 0  # too long, with --too-long skip
    truncated: int = 0
    errors: int = 0  # unreadable records (and too long, with --too-long error)
    tokens: int = 0
    bytes: int = 0  # array data handed to the store, uncompressed

    def add(self, other: Counts) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


def summary(
    label: str,
    counts: Counts,
    *,
    seconds: float,
    shards: int,
    resumed: int,
    stored: int | None = None,
) -> str:
    """The final line: examples, skipped, truncated, errors, bytes, time."""
    stored_text = f" ({human_bytes(stored)} on disk)" if stored is not None else ""
    rate = counts.examples / seconds if seconds > 0 else 0.0
    return (
        f"{label}: {counts.examples} examples in {shards} shards ({resumed} already done), "
        f"{counts.skipped} skipped, {counts.truncated} truncated, {counts.errors} errors, "
        f"{human_bytes(counts.bytes)} written{stored_text}, {seconds:.1f}s ({rate:.1f} ex/s)"
    )
