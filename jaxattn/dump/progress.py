"""The dump's progress bar and its final summary line (stderr)."""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import TextIO

# Non-terminal output (logs): one line per this many seconds at most.
_LOG_EVERY_S = 30.0
_TTY_EVERY_S = 0.2


def human_bytes(n: float) -> str:
    """1234567 -> '1.2 MB' (decimal units, as disks and networks count)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def _count(n: float) -> str:
    return f"{n / 1000:.1f}k" if n >= 10000 else f"{n:.1f}"


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


class Progress:
    """One progress line on stderr: records done, examples/s, tokens/s, bytes, ETA.

    On a terminal it is redrawn in place; otherwise (a log file) a line is
    written every 30 s and at the end.

    Args:
      total: input records this process will go through.
      label: a prefix (e.g. ``dump p1/4``).
      enabled: False for no output.
      stream: where to write (stderr).
    """

    def __init__(
        self, total: int, label: str = "dump", enabled: bool = True, stream: TextIO | None = None
    ):
        self.total, self.label, self.enabled = max(total, 0), label, enabled
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.records = 0
        self.counts = Counts()
        self.start = time.monotonic()
        self._last = 0.0

    def update(self, *, records: int = 0, examples: int = 0, tokens: int = 0, bytes: int = 0):
        """Count work done since the last call and redraw when due."""
        self.records += records
        self.counts.examples += examples
        self.counts.tokens += tokens
        self.counts.bytes += bytes
        now = time.monotonic()
        if self.enabled and now - self._last >= (_TTY_EVERY_S if self.tty else _LOG_EVERY_S):
            self._last = now
            self._draw(now)

    def line(self, now: float | None = None) -> str:
        """The current progress line."""
        elapsed = max((now or time.monotonic()) - self.start, 1e-9)
        frac = self.records / self.total if self.total else 1.0
        rate = self.records / elapsed
        left = max(self.total - self.records, 0)
        eta = f"{left / rate:.0f}s" if rate > 0 else ("0s" if not left else "?")
        bar = "#" * int(min(frac, 1.0) * 24)
        return (
            f"{self.label} {self.records}/{self.total} [{bar:<24}] {100 * frac:3.0f}% "
            f"{_count(self.counts.examples / elapsed)} ex/s "
            f"{_count(self.counts.tokens / elapsed)} tok/s "
            f"{human_bytes(self.counts.bytes)} written "
            f"eta {eta}"
        )

    def _draw(self, now: float) -> None:
        text = self.line(now)
        self.stream.write(("\r" + text + "\x1b[K") if self.tty else (text + "\n"))
        self.stream.flush()

    def close(self) -> None:
        """Draw the final state and end the line."""
        if not self.enabled:
            return
        self._draw(time.monotonic())
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


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
