"""Length buckets and batch sizes: few compiled shapes, little padding.

Capture is output-bound (DESIGN.md, performance model), so a batch is sized by
the bytes it returns: B = the largest power of two with B * bytes(T) within the
output budget, B * T within the token budget, and B <= max_batch. A bucket's
last, partial batch is split into power-of-two batches (35 -> 32 + 2 + 1), so
no row is padding, compiled shapes are bounded by
len(buckets) * (1 + log2(max_batch)) per spec, and once each (bucket, size)
has been seen nothing recompiles. Buckets are 8 tokens apart up to 64, where
most sentences fall, so a sentence carries ~4 padding tokens on average.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

DEFAULT_BUCKETS = (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 256, 320, 384, 512)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Budgets:
    """What one batch may hold, per device.

    Attributes:
      output_bytes: most output bytes one batch may return (device memory).
      tokens: most B * T padded tokens (bounds activation memory).
      max_batch: most examples.
    """

    output_bytes: int = 256 << 20
    tokens: int = 16384
    max_batch: int = 64


@dataclasses.dataclass(frozen=True)
class Batch:
    """One engine step: `rows` (positions into the input) padded to [size, length].

    size == len(rows) except for a data-parallel remainder, padded with dummy rows.
    """

    length: int
    size: int
    rows: tuple[int, ...]


def buckets_for(max_length: int, buckets: Sequence[int] = DEFAULT_BUCKETS) -> tuple[int, ...]:
    """The bucket lengths usable by a model: those below its limit, then the limit."""
    return tuple(sorted({b for b in buckets if b < max_length} | {max_length}))


def _pow2_floor(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


def plan_batches(
    lengths: Sequence[int],
    buckets: Sequence[int],
    bytes_per_example: Callable[[int], int],
    budgets: Budgets,
    *,
    devices: int = 1,
) -> list[Batch]:
    """Group examples into batches by bucket, shortest bucket first.

    Args:
      lengths: real token count of each example.
      buckets: ascending bucket lengths; the last must cover every length.
      bytes_per_example: output bytes of one example padded to a bucket length.
      budgets: what one batch may hold, per device.
      devices: data-parallel width: batch sizes are multiples of it, and a
        bucket's last few examples (fewer than `devices`) are padded up to it.

    Returns:
      Batches covering every position exactly once.
    """
    by_bucket: dict[int, list[int]] = {}
    for pos in sorted(range(len(lengths)), key=lambda p: lengths[p]):
        bucket = next(b for b in buckets if b >= lengths[pos])
        by_bucket.setdefault(bucket, []).append(pos)
    out = []
    for bucket, rows in sorted(by_bucket.items()):
        per_device = batch_size(bucket, bytes_per_example, budgets)
        start = 0
        while start < len(rows):
            left = len(rows) - start
            if left >= devices:
                step = devices * min(per_device, _pow2_floor(left // devices))
                out.append(Batch(bucket, step, tuple(rows[start : start + step])))
            else:
                step = left
                out.append(Batch(bucket, devices, tuple(rows[start:])))
            start += step
    return out


def batch_size(length: int, bytes_per_example: Callable[[int], int], budgets: Budgets) -> int:
    """Largest power of two B with the batch within all three budgets (at least 1)."""
    fit = min(
        budgets.max_batch,
        budgets.output_bytes // max(bytes_per_example(length), 1),
        budgets.tokens // length,
    )
    return _pow2_floor(fit)


def max_shapes(buckets: Sequence[int], max_batch: int) -> int:
    """Upper bound on compiled shapes per capture spec."""
    return len(buckets) * (int(math.log2(_pow2_floor(max_batch))) + 1)
