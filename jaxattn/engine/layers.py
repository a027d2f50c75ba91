"""The encoder's building blocks: LayerNorm, Dense, activations (one example, no batch axis)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxattn.engine.precision import Matmul

init = nn.initializers.normal(0.02)


def activation(name: str):
    """ModelConfig.activation -> the function."""
    if name == "gelu":
        # HF "gelu" is the exact erf gelu; jax.nn.gelu defaults to the tanh form.
        return lambda x: jax.nn.gelu(x, approximate=False)
    if name == "gelu_tanh":
        return lambda x: jax.nn.gelu(x, approximate=True)
    if name == "silu":
        return jax.nn.silu
    return jax.nn.relu


class LayerNorm(nn.Module):
    """LayerNorm with the two-pass variance torch uses, with or without a bias.

    flax.linen.LayerNorm defaults to E[x^2] - E[x]^2 (use_fast_variance), which
    loses precision against the reference; this computes E[(x - mean)^2].
    """

    eps: float
    use_bias: bool = True

    @nn.compact
    def __call__(self, x):
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],))
        mean = x.mean(-1, keepdims=True)
        var = jnp.square(x - mean).mean(-1, keepdims=True)
        y = (x - mean) * jax.lax.rsqrt(var + self.eps) * scale
        if self.use_bias:
            y = y + self.param("bias", nn.initializers.zeros, (x.shape[-1],))
        return y


class Dense(nn.Module):
    """y = x W + b with W shaped [in..., out...] by an einsum spec (b optional)."""

    shape: tuple[int, ...]
    bias_shape: tuple[int, ...]
    equation: str
    mm: Matmul = Matmul()
    use_bias: bool = True

    @nn.compact
    def __call__(self, x):
        kernel = self.param("kernel", init, self.shape)
        y = self.mm(self.equation, x, kernel)
        if self.use_bias:
            y = y + self.param("bias", nn.initializers.zeros, self.bias_shape)
        return y
