"""The capture spec: what to compute, validated once, static under jit.

No jax (numpy only, through the dtype table), so the service and the client
validate requests with the same rules and messages as the engine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from jaxattn.dtypes import OUTPUT_DTYPES
from jaxattn.quantities import QUANTITIES, STATISTICS

DEFAULT_WHAT = ("attention",)
# Compute precisions (`jaxattn.engine.precision`); "highest" is exact float32.
PRECISIONS = ("highest", "tf32", "bf16")


def check_precision(precision: str) -> str:
    """`precision` if it is one of PRECISIONS (ValueError naming the valid ones otherwise)."""
    if precision not in PRECISIONS:
        raise ValueError(
            f"unknown precision {precision!r}: valid precisions are {', '.join(PRECISIONS)}"
        )
    return precision


@dataclasses.dataclass(frozen=True, kw_only=True)
class CaptureSpec:
    """What one capture computes. Hashable: the engine's jit is specialised on it.

    Attributes:
      what: quantity names, in the canonical order of `QUANTITIES`.
      layers: captured layer indices, ascending, 0-indexed.
      heads: captured head indices, ascending, 0-indexed.
      dtype: output dtype, a key of `jaxattn.dtypes.OUTPUT_DTYPES`.
      precision: compute precision of every contraction: "highest" (exact
        float32), "tf32" or "bf16" (`jaxattn.engine.precision`).
    """

    what: tuple[str, ...]
    layers: tuple[int, ...]
    heads: tuple[int, ...]
    dtype: str = "float32"
    precision: str = "highest"

    @property
    def last_layer(self) -> int:
        """Deepest layer the forward must run (layers past it are never computed)."""
        return self.layers[-1]


def _indices(value: Iterable[int] | int | None, count: int, field: str) -> tuple[int, ...]:
    if value is None:
        return tuple(range(count))
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    if isinstance(value, (str, bytes)):
        raise ValueError(f"{field} must be a list of integers in [0, {count - 1}], got {value!r}")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) and not hasattr(v, "__index__"):
            raise ValueError(f"{field} must hold integers in [0, {count - 1}], got {v!r}")
        v = int(v)
        if not 0 <= v < count:
            raise ValueError(f"{field} index {v} is out of range: valid {field} are 0..{count - 1}")
        out.append(v)
    if not out:
        raise ValueError(f"{field} is empty: give None for all, or indices in 0..{count - 1}")
    if len(set(out)) != len(out):
        raise ValueError(f"{field} has duplicate indices: {sorted(out)}")
    return tuple(sorted(out))


def make_spec(
    *,
    what: str | Sequence[str] | None,
    layers: Iterable[int] | int | None,
    heads: Iterable[int] | int | None,
    dtype: str,
    num_layers: int,
    num_heads: int,
    precision: str = "highest",
) -> CaptureSpec:
    """Validate a capture request and return its spec.

    Args:
      what: quantity names (a single name is accepted); None means ("attention",).
      layers: layer indices, or None for all.
      heads: head indices, or None for all.
      dtype: output dtype name.
      precision: compute precision name.
      num_layers: the model's layer count.
      num_heads: the model's heads per layer.

    Raises:
      ValueError: naming the bad field and the valid choices.
    """
    if what is None:
        what = DEFAULT_WHAT
    if isinstance(what, str):
        what = (what,)
    names = list(what)
    for name in names:
        if name not in QUANTITIES:
            raise ValueError(
                f"unknown quantity {name!r} in what: valid names are {', '.join(QUANTITIES)}"
            )
    if not names:
        raise ValueError(f"what is empty: name at least one of {', '.join(QUANTITIES)}")
    if dtype not in OUTPUT_DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}: valid dtypes are {', '.join(OUTPUT_DTYPES)}")
    stats = [n for n in names if n in STATISTICS]
    if dtype == "uint8" and stats:
        raise ValueError(
            f"{', '.join(stats)} cannot be uint8: one affine range would serve both the "
            "fractions and the entropies; use float16 or bfloat16 (8 numbers per head)"
        )
    return CaptureSpec(
        what=tuple(q for q in QUANTITIES if q in set(names)),
        layers=_indices(layers, num_layers, "layers"),
        heads=_indices(heads, num_heads, "heads"),
        dtype=dtype,
        precision=check_precision(precision),
    )
