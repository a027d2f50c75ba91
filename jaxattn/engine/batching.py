"""Length buckets and batch sizes: few compiled shapes, little padding.

Capture is output-bound (DESIGN.md, performance model), so a batch is sized by
the bytes it returns: B = the largest power of two with B * bytes(T) within the
output budget, B * T within the token budget, B times the attention's working
memory (T^2 on the dense path, constant in T on the blockwise one) within the
attention budget, and B <= max_batch. Batch sizes
come from a ladder B, B/s, B/s^2, ..., 1 (s = `size_step`), so compiled shapes
are bounded by len(buckets) * len(ladder) per spec, and once each (bucket,
size) has been seen nothing recompiles. A bucket fills batches of B; what is
left goes into the smallest ladder size that holds it when at most
`pad_fraction` of that batch would be dummy rows (35 -> 32 + 4, one row
padded), else the largest size it fills is split off and the rest planned the
same way (35 -> 32 + 2 + 1 with pad_fraction 0). Padding trades compute (and,
on an accelerator, output bytes) for fewer shapes to compile: measured on 100
EWT sentences with full capture, pad_fraction 0.25 compiles 12 shapes instead
of 21 for 6% more rows.

Past `pad_fraction`, padding is rented against compiling (`ShapeLedger`, the
ski-rental rule): while the batch size a split would need has not been
compiled, the remainder is padded up instead, and the extra padded tokens are
charged to that shape; once they pass `compile_tokens` (what one compile costs
in padded tokens) the split is bought and compiled. A program warmed with one
size per bucket (`Engine.warmup(spec, sizes="largest")`, `ShapeLedger.pad_into`)
goes further: a remainder whose tight plan would compile pads into the smallest
size compiled (or planned in the same call) that holds it, on the same rent.
A first capture compiles
few shapes, a warm engine (or one whose calls keep paying padding) runs the
tight split, and neither costs more than twice the better choice in hindsight.
Measured on 100 EWT sentences, full capture, MiniLM on the 2-core CPU: 8
shapes instead of 12, first capture 11.7 s instead of 16.4 s; repeated calls of
512 sentences run ~15% slower until the rent buys the tight split (BENCHMARKS.md).

Budgets follow the device (`Budgets.for_devices`): the CPU keeps small batches
and fine steps; a GPU/TPU sizes the output budget from its free memory, runs
batches of hundreds and uses a coarser ladder (fewer, slower-to-compile shapes).
Buckets are 8 tokens apart up to 64, where most sentences fall, so a sentence
carries ~4 padding tokens on average; past 512 they are a quarter of an octave
apart (a 4,000-token text pads to 4,096, not to an 8,192-position model's limit).
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Sequence

from jaxattn.engine.ledger import ShapeLedger
from jaxattn.errors import UsageError

__all__ = [
    "WARMUP_SIZES",
    "Batch",
    "Budgets",
    "ShapeLedger",
    "batch_size",
    "buckets_for",
    "ladder",
    "max_shapes",
    "plan_batches",
    "split",
]

# What `Engine.warmup` compiles per bucket: every ladder size, or the largest only.
WARMUP_SIZES = ("all", "largest")
# Up to 512 tokens (sentences and paragraphs) the steps of the measured ladder; past
# it four steps an octave (640, 768, 896, 1024, 1280, ...): a long text pads by at
# most a quarter, and a corpus of long documents compiles at most four shapes per
# doubling of length (up to 131,072 tokens; a model's own limit is always a bucket).
DEFAULT_BUCKETS = (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 256, 320, 384, 512)
DEFAULT_BUCKETS += tuple(p * q // 4 for p in (512 << n for n in range(8)) for q in (5, 6, 7, 8))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Budgets:
    """What one batch may hold, per device, and how batch sizes step.

    Attributes:
      output_bytes: most output bytes one batch may return (device memory).
      tokens: most B * T padded tokens (bounds the activation memory linear in T).
      attention_bytes: most bytes of attention working memory one batch may hold,
        B * `attention_bytes_per_example` (`plan_batches`): the dense path's
        [H, T, T] maps of a layer, which grow with T^2, or the blockwise path's
        blocks (`jaxattn.engine.blockwise`), which do not grow with T.
      max_batch: most examples.
      size_step: batch sizes are max_batch / size_step**k (a power of two).
      pad_fraction: share of a bucket's last batch that may always be dummy rows.
      compile_tokens: what compiling one shape costs, in padded tokens of compute:
        padding past pad_fraction that avoids a compile is rented up to this
        (`ShapeLedger`); 0 turns renting off.
      example_bytes: most output bytes one example may return as one program before
        it runs in layer groups (`jaxattn.engine.layer_groups.GroupPolicy`); None:
        `output_bytes`. Grouping costs the host a copy of every byte (the parts
        assembled into the whole Capture, into fresh pages: 3.4 GB/s on the 2-core
        CPU), so on a GPU/TPU it is what the device memory allows (`for_devices`),
        not the batch budget (issue 30).
    """

    output_bytes: int = 256 << 20
    tokens: int = 16384
    attention_bytes: int = 512 << 20
    max_batch: int = 64
    size_step: int = 2
    pad_fraction: float = 0.25
    compile_tokens: int = 8192
    example_bytes: int | None = None

    def __post_init__(self):
        if self.example_bytes is not None:
            value = self.example_bytes
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or value < 1:
                raise UsageError(f"example_bytes budget must be None or at least 1, got {value!r}")
        for name in ("output_bytes", "tokens", "attention_bytes", "max_batch", "compile_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):  # "many" < 1
                raise UsageError(f"{name} must be a number, got {value!r}")
        for name in ("output_bytes", "tokens", "attention_bytes", "max_batch"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} budget must be at least 1, got {getattr(self, name)}")
        if self.compile_tokens < 0:
            raise UsageError(f"compile_tokens must be at least 0, got {self.compile_tokens}")
        if self.size_step < 2 or self.size_step & (self.size_step - 1):
            raise UsageError(f"size_step must be a power of two >= 2, got {self.size_step}")
        if not 0 <= self.pad_fraction < 1:
            raise UsageError(f"pad_fraction must be in [0, 1), got {self.pad_fraction}")

    @classmethod
    def for_devices(cls, devices: Sequence, **overrides) -> Budgets:
        """Budgets for these devices (keyword overrides win).

        CPU: the defaults (256 MiB of output, 64 examples: measured best on a
        2-core machine; a compile of ~1.3 s is ~8k padded tokens of MiniLM's
        full capture; 512 MiB of [H, T, T] maps: the dense program holds several
        at once, ~11 of them measured for head_stats of a tiny ModernBERT at
        8,192 tokens, issue 31). GPU/TPU: an output budget of an eighth of the free
        device memory (at most 4 GiB: two batches are in flight, besides the
        activations), a quarter of it for the attention maps, up to 512
        examples and 256k tokens, sizes in steps of 4,
        and a compile worth 1M padded tokens (measured on an H200,
        BENCHMARKS.md: a BERT-base shape compiles in 5.5 s with GEMMs on cuBLAS
        (`jaxattn.engine.xla_flags`), and BERT-base at highest runs 101k (full
        capture) to 218k (forward) tokens/s: 0.6M-1.2M). One example runs as one
        program up to an eighth of the free memory, not capped at 4 GiB (`example_bytes`;
        on GPUs `BatchPipeline` caps it at what XLA's pinned host pool has beside the
        results a call holds there, `host.in_flight_room`;
        with an `output_bytes` override given and no `example_bytes`, that
        override): the 4 GiB cap bounds batches; under it Llama-1B's full capture at
        1,024 tokens (4.5 GB a text) ran in layer groups on an H200, 1.5 s a text
        (3.05 GB/s, against 25 GB/s for its attention alone, issue 30).
        """
        base = {}
        if devices and all(d.platform != "cpu" for d in devices):
            free = _free_bytes(devices[0])
            budget = min(4 << 30, max(free // 8, 1 << 20)) if free else 1 << 30
            base = dict(
                max_batch=512,
                tokens=1 << 18,
                attention_bytes=max(free // 4, 1 << 20) if free else 4 << 30,
                size_step=4,
                output_bytes=budget,
                compile_tokens=1 << 20,
            )
            if free and overrides.get("output_bytes") is None:
                base["example_bytes"] = max(free // 8, budget)
        return cls(**{**base, **{k: v for k, v in overrides.items() if v is not None}})

    @property
    def group_bytes(self) -> int:
        """Most output bytes of one example run as one program (`example_bytes`, else
        `output_bytes`): past it the example runs in layer groups."""
        return self.output_bytes if self.example_bytes is None else self.example_bytes


def _free_bytes(device) -> int | None:
    """Free device memory in bytes, or None when the backend does not say."""
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - not every backend implements it
        return None
    if not stats or "bytes_limit" not in stats:
        return None
    free = int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    return free if free > 0 else None


@dataclasses.dataclass(frozen=True)
class Batch:
    """One engine step: `rows` (positions into the input) padded to [size, length].

    size == len(rows) except for a padded remainder, filled with dummy rows.
    rent: (the batch size its padding avoids compiling, the padded tokens it
    costs) when the padding goes past pad_fraction (`ShapeLedger`), else None.
    """

    length: int
    size: int
    rows: tuple[int, ...]
    rent: tuple[int, int] | None = None


def buckets_for(max_length: int, buckets: Sequence[int] = DEFAULT_BUCKETS) -> tuple[int, ...]:
    """The bucket lengths usable by a model: those below its limit, then the limit.

    Raises:
      UsageError: `buckets` is no sequence of whole numbers >= 1 (the engine's
        option buckets), naming the first that is not.
    """
    if isinstance(buckets, str | bytes) or not isinstance(buckets, Sequence | set | frozenset):
        raise UsageError(f"buckets must be a sequence of token counts, got {buckets!r}")
    for b in buckets:
        if isinstance(b, bool) or not isinstance(b, numbers.Integral) or b < 1:
            raise UsageError(f"buckets must be whole numbers of tokens >= 1, got {b!r}")
    return tuple(sorted({int(b) for b in buckets if b < max_length} | {max_length}))


def _pow2_floor(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


def ladder(largest: int, step: int) -> tuple[int, ...]:
    """Batch sizes largest, largest/step, ..., down to 1 (1 always included), descending."""
    sizes, s = [], largest
    while s > 1:
        sizes.append(s)
        s //= step
    return (*sizes, 1)


def split(
    count: int, sizes: Sequence[int], pad_fraction: float, pad_instead=None, pad_into=None
) -> list[tuple[int, int]]:
    """(batch size, real rows) covering `count` rows with batches from `sizes` (descending).

    Full batches of the largest size first; then the size ``pad_into(rest,
    sizes planned so far)`` names, if any; else the smallest size that holds
    the rest, if at most `pad_fraction` of it is padding, or no size is small
    enough to split off, or ``pad_instead(up, count, split_size)`` says to pad
    rather than compile the split's size; else the largest size the rest fills,
    and again.
    """
    out = []
    while count > 0:
        if count >= sizes[0]:
            out.append((sizes[0], sizes[0]))
            count -= sizes[0]
            continue
        into = None if pad_into is None else pad_into(count, {s for s, _ in out})
        if into is not None:
            out.append((into, count))
            return out
        up = min(s for s in sizes if s >= count)
        fills = [s for s in sizes if s <= count]
        if (
            not fills
            or up - count <= pad_fraction * up
            or (pad_instead is not None and pad_instead(up, count, max(fills)))
        ):
            out.append((up, count))
            return out
        out.append((max(fills), max(fills)))
        count -= max(fills)
    return out


def plan_batches(
    lengths: Sequence[int],
    buckets: Sequence[int],
    bytes_per_example: Callable[[int], int],
    budgets: Budgets,
    *,
    attention_bytes_per_example: Callable[[int], int] | None = None,
    devices: int = 1,
    ledger: ShapeLedger | None = None,
    key=None,
) -> list[Batch]:
    """Group examples into batches by bucket, shortest bucket first.

    Args:
      lengths: real token count of each example.
      buckets: ascending bucket lengths; the last must cover every length.
      bytes_per_example: output bytes of one example padded to a bucket length.
      budgets: what one batch may hold, per device, and the size ladder.
      attention_bytes_per_example: attention working memory of one example padded to
        a bucket length (held to `budgets.attention_bytes`); None: not bounded.
      devices: data-parallel width: batch sizes are multiples of it, and a
        bucket's last few examples (fewer than `devices`) are padded up to it.
      ledger: the engine's compiled shapes and rent (None: pad_fraction alone).
      key: the ledger's key of these batches' program (the capture spec...).
        Planning charges nothing: a batch that runs charges its `Batch.rent`.

    Returns:
      Batches covering every position exactly once.
    """
    by_bucket: dict[int, list[int]] = {}
    for pos in sorted(range(len(lengths)), key=lambda p: lengths[p]):
        bucket = next(b for b in buckets if b >= lengths[pos])
        by_bucket.setdefault(bucket, []).append(pos)
    out = []
    for bucket, rows in sorted(by_bucket.items()):
        largest = batch_size(bucket, bytes_per_example, budgets, attention_bytes_per_example)
        per_device = ladder(largest, budgets.size_step)
        sizes = [s * devices for s in per_device]
        rented: list[tuple[int, int]] = []
        rent = None
        if ledger is not None and budgets.compile_tokens:

            def rent(up, count, avoided, bucket=bucket, sizes=sizes, rented=rented):
                # Pad only where it compiles fewer new shapes than the tight split.
                tight = {s for s, _ in split(count, sizes, budgets.pad_fraction)}
                new = sum(not ledger.knows(key, bucket, s) for s in tight)
                tokens = (up - count) * bucket
                if new <= (not ledger.knows(key, bucket, up)) or not ledger.may_rent(
                    key, bucket, avoided, tokens, budgets.compile_tokens
                ):
                    return False
                rented.append((avoided, tokens))  # split() stops at this, the last batch
                return True

        into = None
        if rent is not None and key in ledger.pad_into:

            def into(count, planned, bucket=bucket, sizes=sizes, rented=rented):
                # Where the tight plan compiles, pad into the smallest size compiled (or
                # planned before) that holds the rest; the rent goes to the plan's first new size.
                known = lambda s: s in planned or ledger.knows(key, bucket, s)  # noqa: E731
                tight = dict.fromkeys(s for s, _ in split(count, sizes, budgets.pad_fraction))
                new = [s for s in tight if not known(s)]
                holds = [s for s in sizes if s >= count and known(s)]
                tokens = (min(holds, default=0) - count) * bucket
                if (
                    not new
                    or not holds
                    or not ledger.may_rent(key, bucket, new[0], tokens, budgets.compile_tokens)
                ):
                    return None
                rented.append((new[0], tokens))  # split() stops at this, the last batch
                return min(holds)

        start = 0
        planned = split(len(rows), sizes, budgets.pad_fraction, rent, into)
        for i, (size, real) in enumerate(planned):
            last = rented[0] if rented and i == len(planned) - 1 else None
            out.append(Batch(bucket, size, tuple(rows[start : start + real]), last))
            start += real
    return out


def batch_size(
    length: int,
    bytes_per_example: Callable[[int], int],
    budgets: Budgets,
    attention_bytes_per_example: Callable[[int], int] | None = None,
) -> int:
    """Largest power of two B with the batch within every budget (at least 1): output
    bytes, tokens, examples and, given `attention_bytes_per_example`, attention bytes."""
    fit = min(
        budgets.max_batch,
        budgets.output_bytes // max(bytes_per_example(length), 1),
        budgets.tokens // length,
    )
    if attention_bytes_per_example is not None:
        fit = min(fit, budgets.attention_bytes // max(attention_bytes_per_example(length), 1))
    return _pow2_floor(fit)


def max_shapes(buckets: Sequence[int], budgets: Budgets | int) -> int:
    """Upper bound on compiled shapes per capture spec (an int: 0.1's max_batch)."""
    if isinstance(budgets, int):
        budgets = Budgets(max_batch=budgets)
    return len(buckets) * len(ladder(_pow2_floor(budgets.max_batch), budgets.size_step))
