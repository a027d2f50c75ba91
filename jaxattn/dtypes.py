"""Output dtypes: how a captured tensor is represented on the host, the wire and disk.

Numpy-only (the client dequantises with it). The device side is
`jaxattn.engine.quantize`; both follow this table.

| dtype    | element | error against float32 |
|---|---|---|
| float32  | 4 bytes | exact (bit-identical to the engine's computation) |
| float16  | 2 bytes | relative <= 2^-11 (~4.9e-4) for |x| in [6.1e-5, 65504]; larger -> inf |
| bfloat16 | 2 bytes | relative <= 2^-8 (~3.9e-3); float32's range |
| uint8    | 1 byte  | probability-valued (attention): x = q / 255, abs error <= 1/510;
|          |         | others: x = q * scale + offset per (example, tensor) from its min/max
|          |         | over real positions, abs error <= (max - min) / 510 |
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

OUTPUT_DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "uint8": np.dtype(np.uint8),
}

# uint8 for probability-valued tensors: q = round(255 x), so |x - q/255| <= 1/510.
PROBABILITY_SCALE = 1.0 / 255.0


def dequantize(
    data: np.ndarray, scale: float | None = None, offset: float | None = None
) -> np.ndarray:
    """Return the float view of an array in its output dtype.

    float32/float16/bfloat16 arrays come back unchanged; uint8 arrays are
    dequantised to float32 as ``data * scale + offset``.

    Raises:
      ValueError: a uint8 array without its scale and offset.
    """
    if data.dtype != np.uint8:
        return data
    if scale is None or offset is None:
        raise ValueError("a uint8 tensor needs its scale and offset to be dequantised")
    return data.astype(np.float32) * np.float32(scale) + np.float32(offset)
