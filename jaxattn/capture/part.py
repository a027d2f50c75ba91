"""`CapturePart`: one layer group's share of one example's `Capture`.

The engine may run an example's layers a group at a time (`jaxattn.engine.layer_groups`)
and hand each group's outputs over as it lands: every tensor cut on its L axis
to the group's entries. A part carries the Capture's other fields, so a consumer
can start on an example (a header on the wire, a store's record) with its first
part, and the group boundaries of the whole example, so it knows every part's
place before the last has been computed. `assemble` makes the whole Capture.

Numpy only, as `jaxattn.capture`: the wire's sender reads it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from jaxattn.capture import Capture, bulk
from jaxattn.errors import UsageError
from jaxattn.quantities import QUANTITIES


def ends_example(item) -> bool:
    """Whether `item`, a Capture or a `CapturePart` (or anything with `last`),
    completes its example (a Capture always does). A Capture is told by its type,
    before any attribute is asked: its unknown attribute is an AttributeError with
    suggestions, ~60 us each, on the server's per-example path."""
    return isinstance(item, Capture) or getattr(item, "last", True)


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class CapturePart:
    """Layer group `part` of one example.

    Attributes:
      fields: the example's Capture fields other than tensors and quantization
        (tokens, layers, heads, dtype, precision, text, provenance, ...).
      cuts: where the groups start on the captured layers, and their end:
        (0, 2, 4, 5) is three groups of layers [0, 2), [2, 4), [4, 5) of `fields["layers"]`.
      part: which group this is (0 .. len(cuts) - 2).
      tensors: {name: the example's tensor cut on its L axis to this group's entries,
        `entries`}.
      quantization: as `Capture.quantization` (the same for every part).
    """

    fields: Mapping
    cuts: tuple[int, ...]
    part: int
    tensors: Mapping[str, np.ndarray]
    quantization: Mapping[str, tuple[float, float]] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, cap) -> CapturePart:
        """A whole `Capture` as the one part of its example."""
        fields = {
            f.name: getattr(cap, f.name)
            for f in dataclasses.fields(cap)
            if f.name not in ("tensors", "quantization")
        }
        return cls(
            fields=fields,
            cuts=(0, len(cap.layers)),
            part=0,
            tensors=dict(cap.tensors),
            quantization=dict(cap.quantization),
        )

    @property
    def parts(self) -> int:
        """How many parts the example comes in."""
        return len(self.cuts) - 1

    @property
    def first(self) -> bool:
        return self.part == 0

    @property
    def last(self) -> bool:
        return self.part == self.parts - 1

    @property
    def dtype(self) -> str:
        return self.fields["dtype"]

    def entries(self, name: str, part: int | None = None) -> tuple[int, int]:
        """(lo, hi): the entries of part `part` (None: this one) on quantity `name`'s L
        axis of the whole tensor: hidden_states' extra first entry (the embeddings
        output) belongs to part 0."""
        part = self.part if part is None else part
        extra = QUANTITIES[name].extra_layer
        lo = self.cuts[part] + (extra if part else 0)
        return lo, self.cuts[part + 1] + extra

    def shape(self, name: str) -> tuple[int, ...]:
        """The whole tensor's shape (every part's entries on the L axis)."""
        q, t = QUANTITIES[name], self.tensors[name]
        shape = list(t.shape)
        shape[q.layer_axis] = self.cuts[-1] + q.extra_layer
        return tuple(shape)

    def byte_range(self, name: str, part: int | None = None) -> tuple[int, int]:
        """Where part `part`'s entries lie in the whole tensor's C-order bytes: a
        contiguous range, the L axis being the first."""
        q, t = QUANTITIES[name], self.tensors[name]
        assert q.layer_axis == 0, name  # every quantity's L axis leads (quantities.py)
        row = t.dtype.itemsize * int(np.prod(t.shape[1:], dtype=np.int64))
        lo, hi = self.entries(name, part)
        return lo * row, hi * row


def refusal(spec) -> str | None:
    """Why an example of `spec` (a `jaxattn.spec.CaptureSpec`) cannot come in layer
    groups' parts, or None where it can: affine uint8 quantities take one range per
    (example, tensor) over every layer, which no group sees whole
    (`jaxattn.engine.layer_groups`; the server's limits say so when they refuse one)."""
    if spec.dtype == "uint8":
        affine = [n for n in spec.what if not QUANTITIES[n].probability]
        if affine:
            return (
                f"uint8 {', '.join(affine)} take{'s' if len(affine) == 1 else ''} one range "
                "over every layer of an example, which no layer group sees whole"
            )
    return None


class Assembler:
    """Whole Captures built from parts as they land: each part copied into its example's
    arrays at once (and let go; a large one on several threads, `bulk.copy_into`: the
    copy faults in fresh memory), the Capture handed over with the example's last part.
    Holds the examples in progress only; parts of several examples may interleave."""

    def __init__(self):
        self._open: dict[object, dict[str, np.ndarray]] = {}

    def add(self, key, part: CapturePart):
        """Take the next part of example `key` (its parts in order); the example's
        Capture once this is its last part, else None."""
        whole = self._open.setdefault(key, {})
        for name, t in part.tensors.items():
            if name not in whole:
                whole[name] = np.empty(part.shape(name), t.dtype)
            lo, hi = part.entries(name)
            bulk.copy_into(whole[name][lo:hi], t)
        if not part.last:
            return None
        tensors = self._open.pop(key)
        for t in tensors.values():
            t.flags.writeable = False  # as every Capture's arrays
        return Capture(**part.fields, tensors=tensors, quantization=dict(part.quantization))


def assemble(parts: Sequence[CapturePart]) -> Capture:
    """The whole `Capture` of one example's parts, in order (`Assembler`).

    Raises:
      UsageError: what is no CapturePart (`Engine.capture_layers` yields (index, part)
        pairs: pass their parts), or no part that ends the example (none, or not all).
    """
    assembler, cap = Assembler(), None
    for i, p in enumerate(parts):
        if not isinstance(p, CapturePart):
            pairs = " (capture_layers yields (index, part) pairs: pass their parts)"
            raise UsageError(
                f"parts[{i}] is a {type(p).__name__}, not a CapturePart"
                + (pairs if isinstance(p, tuple) else "")
            )
        cap = assembler.add(0, p)
    if cap is None:  # it returned None
        raise UsageError("no part ends the example: give every part of one example, in order")
    return cap
