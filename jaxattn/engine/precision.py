"""Matmul precision for every einsum in the model.

Framework-default trap: on NVIDIA GPUs (A100 and later) and TPUs, XLA's
default float32 matmul precision uses TF32 / bf16 passes, which moves attention
by ~1e-3 and breaks parity with the PyTorch reference. The engine asks for
HIGHEST (true float32) everywhere; on the CPU it costs nothing.
"""

import jax

HIGHEST = jax.lax.Precision.HIGHEST
