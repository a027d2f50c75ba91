"""Compute precision: the one einsum every contraction of the model goes through.

    mm = Matmul("highest", platform="gpu")
    y = mm("TD,DHK->THK", x, kernel)

| precision | operands | accumulation | where it is fast |
|---|---|---|---|
| highest | float32 | float32 | exact: parity with the PyTorch reference (default) |
| tf32 | rounded to 10 mantissa bits | float32 | NVIDIA tensor cores (A100 and later) |
| bf16 | rounded to 7 mantissa bits | float32 | GPU and TPU tensor units |

Framework-default trap: on NVIDIA GPUs (A100 and later) and TPUs, XLA's
default float32 matmul precision already uses TF32 / bf16 passes, which moves
attention by ~1e-3 and breaks parity with the reference. "highest" asks for
true float32 everywhere (free on the CPU). "tf32" and "bf16" are opt-in; on a
platform without the native algorithm (the CPU) they are emulated, operands
rounded with `reduce_precision` and multiplied in float32, so the numbers match
the accelerator's and the documented error bounds can be checked anywhere
(slower than "highest" there: use them on the CPU only to preview).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jaxattn.spec import PRECISIONS, check_precision

HIGHEST = jax.lax.Precision.HIGHEST
_MANTISSA_BITS = {"tf32": 10, "bf16": 7}
# (precision, platform) -> the native dot algorithm or precision.
_NATIVE = {
    ("tf32", "gpu"): jax.lax.DotAlgorithmPreset.TF32_TF32_F32,
    ("bf16", "gpu"): jax.lax.DotAlgorithmPreset.BF16_BF16_F32,
    ("tf32", "tpu"): jax.lax.Precision.HIGH,  # bf16 x3: at least TF32's accuracy
    ("bf16", "tpu"): jax.lax.DotAlgorithmPreset.BF16_BF16_F32,
}


__all__ = ["HIGHEST", "PRECISIONS", "Matmul", "check_precision"]


@dataclasses.dataclass(frozen=True)
class Matmul:
    """An einsum at one compute precision on one platform (hashable: static under jit)."""

    precision: str = "highest"
    platform: str = "cpu"

    def __post_init__(self):
        check_precision(self.precision)

    def __call__(self, equation: str, *operands):
        if self.precision == "highest":
            return jnp.einsum(equation, *operands, precision=HIGHEST)
        native = _NATIVE.get((self.precision, self.platform))
        if native is not None:
            return jnp.einsum(equation, *operands, precision=native)
        bits = _MANTISSA_BITS[self.precision]
        rounded = [jax.lax.reduce_precision(x, exponent_bits=8, mantissa_bits=bits)
                   for x in operands]  # fmt: skip
        return jnp.einsum(equation, *rounded, precision=HIGHEST)
