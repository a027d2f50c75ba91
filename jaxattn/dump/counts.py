"""What a dump did (or what a store holds), and the job's final summary line."""

from __future__ import annotations

import dataclasses

from jaxattn.progress import counted, human_bytes


@dataclasses.dataclass
class Counts:
    """What a process did (or what a store holds)."""

    examples: int = 0
    skipped: int = 0  # left out as too long, with --too-long skip
    truncated: int = 0
    errors: int = 0  # left out as bad records, with --on-error skip (too long ones too,
    # with --too-long error)
    tokens: int = 0
    bytes: int = 0  # array data handed to the store, uncompressed

    def add(self, other: Counts) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


def left_out(counts: Counts) -> str:
    """'N skipped': every record left out, with why ('2 bad records, 1 too long')."""
    why = [counted(counts.errors, "bad record")] if counts.errors else []
    if counts.skipped:
        why.append(f"{counts.skipped} too long")
    return f"{counts.skipped + counts.errors} skipped" + (f" ({', '.join(why)})" if why else "")


def summary(
    label: str,
    counts: Counts,
    *,
    seconds: float,
    shards: int,
    resumed: int,
    stored: int | None = None,
) -> str:
    """The final line: examples, skipped (bad records and too long), truncated, bytes, time."""
    stored_text = f" ({human_bytes(stored)} on disk)" if stored is not None else ""
    rate = counts.examples / seconds if seconds > 0 else 0.0
    return (
        f"{label}: {counted(counts.examples, 'example')} in {counted(shards, 'shard')} "
        f"({resumed} already done), {left_out(counts)}, {counts.truncated} truncated, "
        f"{human_bytes(counts.bytes)} written{stored_text}, {seconds:.1f}s ({rate:.1f} ex/s)"
    )
