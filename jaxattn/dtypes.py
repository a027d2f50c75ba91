"""Output dtypes: how a captured tensor is represented on the host, the wire and disk.

Numpy-only (the client dequantises with it). The device side is
`jaxattn.engine.quantize`; both follow this table, `DTYPES`: per output dtype
its numpy type, what a file format without that type stores instead (its raw
bits), and its error against float32 (docs/reference/dtypes.md is written
from it). uint8 of a probability-valued tensor (attention) is x = q / 255; of
any other, x = q * scale + offset per (example, tensor), from its min/max over
real positions.
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np

from jaxattn.errors import UsageError


@dataclasses.dataclass(frozen=True)
class OutputDtype:
    """One output dtype.

    Attributes:
      dtype: its numpy type.
      bits: the unsigned type whose raw bits npy and zarr files hold instead (they
        have no such type), or None: they hold `dtype` itself.
      relative_error: the bound on |x - x_float32| / |x| within the type's range
        (0: exact; None: no relative bound, uint8's is absolute, see `error`).
      error: the error against float32, in words (the docs' table).
    """

    dtype: np.dtype
    bits: np.dtype | None
    relative_error: float | None
    error: str


DTYPES: dict[str, OutputDtype] = {
    "float32": OutputDtype(
        np.dtype(np.float32), None, 0.0, "exact (bit-identical to the engine's computation)"
    ),
    "float16": OutputDtype(
        np.dtype(np.float16),
        None,
        2.0**-11,
        "relative ≤ 2⁻¹¹ (≈ 4.9e-4) for |x| in [6.1e-5, 65504]; |x| ≥ 65520 becomes ±inf",
    ),
    "bfloat16": OutputDtype(
        np.dtype(ml_dtypes.bfloat16),
        np.dtype(np.uint16),
        2.0**-8,
        "relative ≤ 2⁻⁸ (≈ 3.9e-3); float32's range",
    ),
    "uint8": OutputDtype(
        np.dtype(np.uint8),
        None,
        None,
        "quantities marked q/255 in the quantities table: absolute ≤ 1/510; those marked "
        "affine: absolute ≤ (max − min)/510 of the example's tensor; not those marked no",
    ),
}

# output dtype name -> its numpy type
OUTPUT_DTYPES: dict[str, np.dtype] = {name: d.dtype for name, d in DTYPES.items()}

# uint8 for probability-valued tensors: q = round(255 x), so |x - q/255| <= 1/510.
PROBABILITY_SCALE = 1.0 / 255.0


def to_bits(array: np.ndarray, dtype: str) -> np.ndarray:
    """An array of output dtype `dtype` as npy and zarr files hold it: a dtype they lack
    (bfloat16) as its raw bits (`OutputDtype.bits`), any other as it is."""
    bits = DTYPES[dtype].bits
    return array if bits is None else array.view(bits)


def from_bits(array: np.ndarray, dtype: str) -> np.ndarray:
    """Inverse of `to_bits`: the stored array back in its output dtype."""
    return array if DTYPES[dtype].bits is None else array.view(DTYPES[dtype].dtype)


def dequantize(
    data: np.ndarray, scale: float | None = None, offset: float | None = None
) -> np.ndarray:
    """Return the float view of an array in its output dtype.

    float32/float16/bfloat16 arrays come back unchanged; uint8 arrays are
    dequantised to float32 as ``data * scale + offset``.

    Raises:
      UsageError: a uint8 array without its scale and offset.
    """
    if data.dtype != np.uint8:
        return data
    if scale is None or offset is None:
        raise UsageError("a uint8 tensor needs its scale and offset to be dequantised")
    return data.astype(np.float32) * np.float32(scale) + np.float32(offset)
