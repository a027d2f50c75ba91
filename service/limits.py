"""Output limits: a request whose output cannot fit is refused before any compute.

One example's output grows with its padded length squared for the map
quantities (attention of a base encoder at 8,192 tokens: 12 layers x 12 heads x
8,192^2 x 4 bytes = 38.7 GB). The server refuses such a request up front, with
RESOURCE_EXHAUSTED naming the limit, the size asked for and what would fit,
instead of running out of memory:

  - per example: the output of one example padded to its length bucket (what the
    engine holds on the device for it, and the server buffers whole) must fit
    `max_example_bytes` and the server's result buffers (`max_buffered_bytes`).
    Where the engine runs an example in layer groups (`Engine.part_bytes`: a
    request of several layers whose example exceeds the limit), it is one group
    that must fit: the server computes, buffers and sends the example a group
    of layers at a time (`jaxattn.engine.layer_groups`), so the limit bounds
    what it holds, and an example of any length fits whose one layer does;
  - per request: the output of all examples together must fit `max_result_bytes`.

A request that selects the maps' query rows and key positions (query_positions,
key_positions) is sized by them: R x S' per map, not T x T (`Engine.output_bytes`).

`longest` answers the other way round: the longest text a request of some spec
can send (ModelInfo.longest_text_statistics / longest_text_attention).
"""

from __future__ import annotations

import dataclasses

from jaxattn.capture.part import refusal as ungrouped
from jaxattn.quantities import MAPS, STATISTICS


def human_bytes(n: int) -> str:
    """`n` bytes in decimal units (38.7 GB, 4.3 MB, 512 B), as people read sizes."""
    for unit, scale in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def example_limit(max_example_bytes: int, max_buffered_bytes: int) -> tuple[int, str]:
    """(bytes, name) of the binding per-example limit of a server with these options:
    the smaller of the two that are set; (0, "") where neither is. An example over it
    runs in layer groups within it (the batcher's and warmup's `group_bytes`)."""
    limits = [(v, n) for v, n in ((max_example_bytes, "max_example_bytes"),) if v]
    if max_buffered_bytes and (not limits or max_buffered_bytes < limits[0][0]):
        limits = [(max_buffered_bytes, "max_buffered_bytes")]
    return limits[0] if limits else (0, "")


class OutputLimits:
    """What one example and one request may return, checked against an engine's sizes.

    Args:
      engine: has `output_bytes(spec, length)` (None of it: nothing is checked),
        `buckets` (the padded lengths; without it an example is its own length) and
        `part_bytes(spec, length, limit)` (without it an example is held whole).
      max_example_bytes: most output bytes of one example, or of one layer group of
        an example the engine runs in groups (0: no limit of its own).
      max_buffered_bytes: the server's result buffers; an example (a layer group) is
        buffered whole, so it bounds one example too (0: none).
      max_result_bytes: most output bytes of one request, all examples (0: none).
    """

    def __init__(
        self,
        engine,
        *,
        max_example_bytes: int = 0,
        max_buffered_bytes: int = 0,
        max_result_bytes: int = 0,
    ):
        self.sizer = getattr(engine, "output_bytes", None)
        # What the engine hands over at once (a layer group's outputs), if it says.
        self.part_sizer = getattr(engine, "part_bytes", None)
        self.buckets = tuple(getattr(engine, "buckets", ()) or ())
        # The binding per-example limit and its name (the jaxattn-limit trailer).
        self.example_bytes, self.example_limit = example_limit(
            max_example_bytes, max_buffered_bytes
        )
        self.result_bytes = max_result_bytes
        info = getattr(engine, "info", None)
        self.max_length = getattr(info, "max_positions", 0) or max(self.buckets, default=0)

    def padded(self, length: int) -> int:
        """The length the engine pads an example of `length` tokens to."""
        return next((b for b in self.buckets if b >= length), length)

    def example_size(self, spec, length: int) -> int:
        """Output bytes of one example of `length` tokens, padded to its bucket."""
        return int(self.sizer(spec, self.padded(length))) if self.sizer else 0

    def held_size(self, spec, length: int) -> int:
        """Output bytes the server holds at once of one example of `length` tokens: a
        layer group's where the engine runs it in groups within the per-example limit,
        else `example_size`."""
        if self.part_sizer is None or not self.example_bytes:
            return self.example_size(spec, length)
        return int(self.part_sizer(spec, self.padded(length), self.example_bytes))

    def total_size(self, spec, tokenized) -> int:
        """Output bytes of all of `tokenized` under `spec`, as returned (unpadded)."""
        return sum(int(self.sizer(spec, e.length)) for e in tokenized) if self.sizer else 0

    def check(self, spec, tokenized) -> tuple[str, str, str] | None:
        """Why the output of `tokenized` under `spec` cannot fit: (message, field,
        limit) for a RESOURCE_EXHAUSTED, or None if it fits."""
        if self.sizer is None:
            return None
        total = 0
        for i, e in enumerate(tokenized):
            held = self.held_size(spec, e.length)
            if self.example_bytes and held > self.example_bytes:
                size = self.example_size(spec, e.length)
                padded = self.padded(e.length)
                pad = f", padded to {padded:,}" if padded != e.length else ""
                group = f", {human_bytes(held)} a layer group" if held < size else ""
                why = ungrouped(spec) if len(spec.layers) > 1 and held == size else None
                if why is not None:  # refused whole: say why it does not run in groups
                    group = f" (not in layer groups: {why})"
                return (
                    f"texts[{i}] ({e.length:,} tokens{pad}) asks {human_bytes(size)} of "
                    f"{_what(spec)}{group}; this server returns at most "
                    f"{human_bytes(self.example_bytes)} per example, or per layer group of "
                    f"one (ModelInfo.{self.example_limit}){self._fits(spec)}: "
                    f"{_advice(spec, per_example=True)}",
                    f"texts[{i}]",
                    self.example_limit,
                )
            total += int(self.sizer(spec, e.length))  # what is returned: the real length
        if self.result_bytes and total > self.result_bytes:
            return (
                f"the {len(tokenized):,} texts ask {human_bytes(total)} of {_what(spec)} "
                f"in all; this server returns at most {human_bytes(self.result_bytes)} per "
                "request (ModelInfo.max_result_bytes): send fewer or shorter texts, or "
                f"{_advice(spec)}",
                "texts",
                "max_result_bytes",
            )
        return None

    def longest(self, spec, max_length: int, max_tokens: int = 0) -> int:
        """The longest text (tokens, at most `max_length` and `max_tokens`) whose output
        under `spec` fits one example and one request; 0 if not even one token does."""
        top = min(max_length, max_tokens) if max_tokens else max_length
        if self.sizer is None:
            return top

        def fits(n: int) -> bool:
            example = not self.example_bytes or self.held_size(spec, n) <= self.example_bytes
            result = not self.result_bytes or int(self.sizer(spec, n)) <= self.result_bytes
            return example and result

        lo, hi = 0, top  # fits(lo) (0 tokens: nothing asked); find the largest that fits
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
        return lo  # sizes grow with the (padded) length: the bounds of a bucket

    def _fits(self, spec) -> str:
        n = self.longest(spec, self.max_length) if self.max_length else 0
        return f"; texts up to {n:,} tokens fit with this selection" if n else ""


def _what(spec) -> str:
    names = ", ".join(spec.what)
    rows = "" if spec.query_positions is None else f" x {len(spec.query_positions)} query rows"
    keys = "" if spec.key_positions is None else f" x {len(spec.key_positions)} keys"
    return (
        f"{names} ({len(spec.layers)} layers x {len(spec.heads)} heads{rows}{keys}, {spec.dtype})"
    )


def _advice(spec, per_example: bool = False) -> str:
    out = ["select fewer layers/heads", "ask for statistics (head_stats)"]
    if spec.query_positions is None and set(spec.what) & set(MAPS):
        out.insert(1, "select query rows (query_positions)")
    # Per example, several layers of affine quantities run in layer groups, but not at
    # uint8 (one range over every layer: `refusal`): float16 halves a group and keeps them.
    groups = per_example and len(spec.layers) > 1
    if groups and ungrouped(dataclasses.replace(spec, dtype="uint8")) is not None:
        if spec.dtype in ("float32", "uint8"):
            out.append("float16")
    elif spec.dtype != "uint8":
        out.append("uint8")
    if all(name in STATISTICS for name in spec.what):
        out = ["send shorter texts"]
    return ", ".join(out[:-1]) + (" or " if len(out) > 1 else "") + out[-1]
