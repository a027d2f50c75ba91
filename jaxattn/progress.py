"""The one progress line every long command draws on stderr (standard library only).

    bar = Progress(len(texts), "analyze")
    for cap in source.stream(texts):
        ...
        bar.update(1, tokens=cap.length)
    bar.close()

A Progress is also the progress callback of `capture_iter`: called with each
input's Capture (None when skipped), it counts it.

    for cap in engine.capture_iter(texts, progress=bar): ...

On a terminal the line is redrawn in place (at most 5 times a second);
otherwise (a log file) a line is written at the first update, then after each
further tenth of the total or 30 s, whichever comes first, and at the end.
"""

from __future__ import annotations

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


def counted(n: int, noun: str) -> str:
    """(1, 'layer') -> '1 layer', (6, 'layer') -> '6 layers': a count and its noun."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _count(n: float) -> str:
    return f"{n / 1000:.1f}k" if n >= 10000 else f"{n:.1f}"


class Progress:
    """Units done out of a total, the examples/s rate, tokens/s and bytes when counted, ETA.

    Args:
      total: units of work (input records, texts) this bar goes through.
      label: a prefix (e.g. ``dump p1/4``, ``analyze``).
      enabled: False for no output at all.
      stream: where to write (stderr).
    """

    def __init__(
        self, total: int, label: str, *, enabled: bool = True, stream: TextIO | None = None
    ):
        self.total, self.label, self.enabled = max(total, 0), label, enabled
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.done = self.examples = self.tokens = self.bytes = 0
        self.start = time.monotonic()
        self._last = float("-inf")
        self._drawn = -1  # `done` at the last drawn line

    def update(
        self, done: int = 0, *, examples: int | None = None, tokens: int = 0, bytes: int = 0
    ) -> None:
        """Count work finished since the last call and redraw when due.

        Args:
          done: units of `total` finished (a record read, skipped or captured).
          examples: examples captured among them (default: `done`).
          tokens: their tokens, shown as a rate when any are counted.
          bytes: bytes written for them, shown when any are counted.
        """
        self.done += done
        self.examples += done if examples is None else examples
        self.tokens += tokens
        self.bytes += bytes
        now = time.monotonic()
        if self.enabled and (
            now - self._last >= (_TTY_EVERY_S if self.tty else _LOG_EVERY_S)
            or not self.tty
            and self._tenth(self.done) > self._tenth(self._drawn)
        ):
            self._draw(now)

    def __call__(self, capture) -> None:
        """The `capture_iter` progress callback: one input done, its Capture or None."""
        if capture is None:
            self.update(1, examples=0)
        else:
            self.update(1, tokens=capture.length)

    def _tenth(self, done: int) -> int:
        return 10 * done // self.total if self.total else 10

    def line(self, now: float | None = None) -> str:
        """The current progress line."""
        elapsed = max((now or time.monotonic()) - self.start, 1e-9)
        frac = self.done / self.total if self.total else 1.0
        rate = self.done / elapsed
        left = max(self.total - self.done, 0)
        eta = f"{left / rate:.0f}s" if rate > 0 else ("0s" if not left else "?")
        bar = "#" * int(min(frac, 1.0) * 24)
        parts = [
            f"{self.label} {self.done}/{self.total} [{bar:<24}] {100 * frac:3.0f}%",
            f"{_count(self.examples / elapsed)} ex/s",
        ]
        if self.tokens:
            parts.append(f"{_count(self.tokens / elapsed)} tok/s")
        if self.bytes:
            parts.append(f"{human_bytes(self.bytes)} written")
        return " ".join([*parts, f"eta {eta}"])

    def _draw(self, now: float) -> None:
        self._last, self._drawn = now, self.done
        text = self.line(now)
        self.stream.write(("\r" + text + "\x1b[K") if self.tty else (text + "\n"))
        self.stream.flush()

    def message(self, text: str) -> None:
        """Write a line of its own above the progress line (a warning, a skipped record)."""
        self.stream.write(("\r\x1b[K" if self.tty else "") + text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Draw the final state and end the line."""
        if not self.enabled:
            return
        if self.tty or self.done != self._drawn:  # a log has its last line already
            self._draw(time.monotonic())
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
