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
import functools

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
            return _einsum(equation, operands, HIGHEST)
        native = _NATIVE.get((self.precision, self.platform))
        if native is not None:
            return _einsum(equation, operands, native)
        bits = _MANTISSA_BITS[self.precision]
        rounded = [
            jax.lax.reduce_precision(x, exponent_bits=8, mantissa_bits=bits) for x in operands
        ]
        return _einsum(equation, rounded, HIGHEST)

    def default_precision(self) -> str | None:
        """This contraction as a `jax.default_matmul_precision` value, for code that calls
        jnp itself (`jax.nn.dot_product_attention`), or None where the platform emulates
        the precision (operands rounded first: no default precision does that)."""
        if self.precision == "highest":
            return "highest"
        native = _NATIVE.get((self.precision, self.platform))
        if native is None:
            return None
        return native.name if isinstance(native, jax.lax.DotAlgorithmPreset) else "high"


def _einsum(equation: str, operands, precision):
    """jnp.einsum, with two-operand contractions as one `lax.dot_general` (+ transpose).

    Same program, a fraction of the tracing: jnp.einsum plans a contraction path
    and traces a nested jit on every call, ~1 ms each, and a capture step makes
    ~15 contractions per layer for every compiled shape. Equations with three
    operands, a repeated index, an index summed away alone, an implicit output
    or an ellipsis go to jnp.einsum.
    """
    plan = _dot_plan(equation) if len(operands) == 2 else None
    if plan is None:
        return jnp.einsum(equation, *operands, precision=precision)
    dims, perm = plan
    y = jax.lax.dot_general(*operands, dims, precision=precision)
    return y if perm is None else jax.lax.transpose(y, perm)


@functools.cache
def _dot_plan(equation: str):
    """((contracting, batch) dimension numbers, output permutation or None) of a
    two-operand einsum, or None where dot_general alone cannot express it."""
    parts = equation.replace(" ", "").split("->")
    if len(parts) != 2 or parts[0].count(",") != 1 or "." in equation:
        return None  # implicit output or an ellipsis: jnp.einsum's own rules
    (lhs, rhs), out = parts[0].split(","), parts[1]
    if len(set(lhs)) < len(lhs) or len(set(rhs)) < len(rhs) or len(set(out)) < len(out):
        return None
    if any(i not in rhs and i not in out for i in lhs) or any(
        i not in lhs and i not in out for i in rhs
    ):
        return None  # an index summed over one operand alone
    batch = [i for i in lhs if i in rhs and i in out]
    contract = [i for i in lhs if i in rhs and i not in out]
    free = [i for i in lhs if i not in rhs] + [i for i in rhs if i not in lhs]
    produced = batch + free  # dot_general's output order
    if sorted(produced) != sorted(out):
        return None
    dims = (
        (tuple(lhs.index(i) for i in contract), tuple(rhs.index(i) for i in contract)),
        (tuple(lhs.index(i) for i in batch), tuple(rhs.index(i) for i in batch)),
    )
    perm = tuple(produced.index(i) for i in out)
    return dims, None if perm == tuple(range(len(perm))) else perm
