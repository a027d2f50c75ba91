"""Layer groups: one example's captured layers run and copied a group at a time.

One capture program runs every layer of a batch and returns every captured
layer's outputs at once, so the device holds L layers' outputs of an example
together (at 32k tokens one head's map is 4 GB per layer). Grouped, the layer
stack runs as several programs (`jaxattn.engine.step.CaptureStep.group`): the
first takes the embeddings, each takes the hidden state the one before left on
the device, runs its layers and returns that group's captures only; the
pipeline dispatches group g+1 while group g's outputs copy to the host
(`jaxattn.engine.pipeline.BatchPipeline.run_groups`). The numbers are those of
the one program within float32 rounding (the programs' edges change XLA's
fusions, nothing else).

A group is a run of `size` captured layers (`groups_of`): it runs the layers
from where the one before stopped up to its last captured layer, so the layers
between two captured ones run in the later group and layers past the deepest
captured one never run, as in the one program. Its outputs are the whole
example's with the L axis cut to its layers (`CapturePart.entries`);
hidden_states' extra first entry, the embeddings output, comes with group 0.

The group size follows the example budget (`size_for`): the most captured layers
whose outputs of one example fit `batching.Budgets.group_bytes` (at least 1: the
output budget, on a GPU/TPU an eighth of its free memory), so a group's program
returns at most what one example's may. The engine groups a request only where one
example's outputs exceed that budget (`GroupPolicy`).
Affine uint8 quantities (`refusal`, from `jaxattn.capture.part`) are never
grouped: their range is one per (example, tensor), taken over every layer,
which no group sees whole.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

# numpy-only, beside the parts it concerns: the server's limits read it too
from jaxattn.capture.part import refusal as refusal
from jaxattn.errors import UsageError
from jaxattn.spec import CaptureSpec


@dataclasses.dataclass(frozen=True)
class Group:
    """Layers start..stop-1 of the stack run as one program, capturing `count` of the
    spec's layers from entry `first` of `spec.layers` on."""

    start: int
    stop: int
    first: int
    count: int

    @property
    def span(self) -> tuple[int, int]:
        """(start, stop): the layers the group's program runs (`Encoder`'s span)."""
        return (self.start, self.stop)


def groups_of(spec: CaptureSpec, size: int) -> list[Group]:
    """The spec's captured layers in groups of `size` (the last may hold fewer).

    Raises:
      RuntimeError: a size below 1 (`GroupPolicy.size`'s 0 means no groups).
    """
    if size < 1:
        raise RuntimeError(f"layer group size must be at least 1, got {size}")
    out, start = [], 0
    for first in range(0, len(spec.layers), size):
        chunk = spec.layers[first : first + size]
        out.append(Group(start, chunk[-1] + 1, first, len(chunk)))
        start = chunk[-1] + 1
    return out


def cuts(groups: list[Group]) -> tuple[int, ...]:
    """Where the groups start on the captured layers, and their end
    (`jaxattn.capture.part.CapturePart.cuts`)."""
    return (*(g.first for g in groups), groups[-1].first + groups[-1].count)


def template(config, spec: CaptureSpec, span: tuple[int, int], known: dict) -> tuple:
    """(the span whose compiled program runs layer group `span`, the layer shift).

    Scanned layers (`layer_loop` "scan") take each layer's weight set, kind and gates
    as data, so two groups whose runs of alike layers look the same from their first
    layer share one program, moved by the difference of their first layers (a traced
    shift, `Encoder(shift=)`): a 22-layer stack in groups of 2 compiles 3 group
    programs, not 11. Not shared (shift None): a group at layer 0 (the embeddings,
    ModernBERT's bare first layer), and models whose layers share weight sets
    (ALBERT). `known` maps each signature to the first span that had it (the step's).
    """
    from jaxattn.engine import layer_loop

    start, stop = span
    if start == 0 or config.layer_groups:
        return span, None
    runs = layer_loop.clip(layer_loop.layer_runs(config, spec, scan=True), start, stop)
    signature = (
        spec,
        stop - start,
        stop == config.num_layers,  # the final norm
        tuple((r.start - start, r.stop - start, r.captured, r.output) for r in runs),
    )
    first = known.setdefault(signature, span)
    return first, start - first[0]


def first_layers(spec: CaptureSpec, count: int) -> CaptureSpec:
    """`spec` with its first `count` captured layers only (a group's outputs' size)."""
    return dataclasses.replace(spec, layers=spec.layers[:count])


def size_for(spec: CaptureSpec, length: int, bytes_of: Callable, budget: int) -> int:
    """The most captured layers whose outputs of one example padded to `length` fit
    `budget` bytes (group 0's, hidden_states' embeddings entry included), at least 1.

    bytes_of(spec, length): one example's output bytes (`BatchPipeline.output_bytes`).
    """
    one = bytes_of(first_layers(spec, 1), length)
    if len(spec.layers) == 1:
        return 1
    per_layer = bytes_of(first_layers(spec, 2), length) - one
    if per_layer <= 0:
        return len(spec.layers)
    return int(min(len(spec.layers), max(1, 1 + (budget - one) // per_layer)))


@dataclasses.dataclass(frozen=True)
class GroupPolicy:
    """When the engine runs a request in layer groups, and how many layers a group holds.

    layers: None (the default): group a request when one example's outputs exceed
    the output budget, `size_for` layers a group; 0: never; n > 0: always, n
    captured layers a group (a request `refusal` names still runs as one program).
    """

    layers: int | None = None

    def __post_init__(self):
        if self.layers is not None and self.layers < 0:
            raise UsageError(f"layer_group must be None, 0 or a positive size, got {self.layers}")

    def size(self, spec: CaptureSpec, length: int, bytes_of: Callable, budget: int) -> int:
        """Layers per group for one example of `spec` padded to `length`; 0: one program."""
        if self.layers == 0 or refusal(spec) is not None or len(spec.layers) < 2:
            return 0
        if self.layers is not None:
            return min(self.layers, len(spec.layers))
        if bytes_of(spec, length) <= budget:
            return 0
        size = size_for(spec, length, bytes_of, budget)
        return size if size < len(spec.layers) else 0

    def fallback(self, spec: CaptureSpec) -> int:
        """Layers per group for an example that ran out of device memory as one program
        (`jaxattn.engine.oom.in_groups`): half its captured layers, rounded up; 0 where
        it cannot run in groups (never, a request `refusal` names, one captured layer).
        (With a fixed size every other request runs in groups already: `size`.)"""
        if self.layers == 0 or refusal(spec) is not None or len(spec.layers) < 2:
            return 0
        return -(-len(spec.layers) // 2)
