"""The encoder's building blocks: LayerNorm, Dense, activations (one example, no batch axis)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxattn.engine.precision import Matmul
from jaxattn.errors import CheckpointError

init = nn.initializers.normal(0.02)


def param(module: nn.Module, name: str, init_fn, shape: tuple[int, ...]):
    """`module.param(name, init_fn, shape)` with a plain shape check once params exist.

    flax checks an existing param by tracing its initialiser (`jax.eval_shape`,
    ~1 ms of every trace per param, ~100 params in a capture step); comparing
    the shape gives the same guarantee. Without params (`Module.init`) it is
    `module.param`.

    Raises:
      CheckpointError: the existing param's shape is not `shape` (weights that do not
        fit their config).
    """
    if not module.has_variable("params", name):
        return module.param(name, init_fn, shape)
    value = module.get_variable("params", name)
    if tuple(value.shape) != tuple(shape):
        raise CheckpointError(
            f"param {'/'.join((*module.path, name))} has shape "
            f"{tuple(value.shape)}, the config needs {tuple(shape)}"
        )
    return value


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
        scale = param(self, "scale", nn.initializers.ones, (x.shape[-1],))
        mean = x.mean(-1, keepdims=True)
        var = jnp.square(x - mean).mean(-1, keepdims=True)
        y = (x - mean) * jax.lax.rsqrt(var + self.eps) * scale
        if self.use_bias:
            y = y + param(self, "bias", nn.initializers.zeros, (x.shape[-1],))
        return y


class RMSNorm(nn.Module):
    """RMSNorm as HF's LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) * scale, in float32.

    With an `offset` (Gemma: 1) the scale is offset + w, applied in float32 before the
    cast back, as HF's Gemma2RMSNorm: (x * rsqrt(...) * (1 + w.float())).type_as(x).
    No centring and no bias (`use_bias` must be False: the family tables give none).
    """

    eps: float
    use_bias: bool = False
    offset: float = 0.0

    @nn.compact
    def __call__(self, x):
        scale = param(self, "scale", nn.initializers.ones, (x.shape[-1],))
        x32 = jnp.asarray(x, jnp.float32)
        var = jnp.square(x32).mean(-1, keepdims=True)
        normed = x32 * jax.lax.rsqrt(var + self.eps)
        if self.offset:
            return (normed * (self.offset + jnp.asarray(scale, jnp.float32))).astype(x.dtype)
        return scale * normed.astype(jnp.result_type(x))


def norm_class(norm_type: str):
    """ModelConfig.norm_type -> the norm module ("layer": LayerNorm, "rms": RMSNorm)."""
    return RMSNorm if norm_type == "rms" else LayerNorm


def make_norm(config, name: str | None = None):
    """The model's norm module (`norm_class`) with its eps, bias and (RMSNorm) offset."""
    kw = dict(eps=config.layer_norm_eps, use_bias=config.norm_bias, name=name)
    if config.norm_type == "rms":
        kw["offset"] = config.norm_offset
    return norm_class(config.norm_type)(**kw)


def norm_statistic(h, norm_type: str, eps: float):
    """The divisor of a norm applied to h [..., D]: sqrt(var + eps) (LayerNorm, two-pass
    variance) or sqrt(mean(h^2) + eps) (RMSNorm): s_i of the AttnResLn decomposition."""
    if norm_type == "rms":
        return jnp.sqrt(jnp.square(h).mean(-1) + eps)
    return jnp.sqrt(jnp.square(h - h.mean(-1, keepdims=True)).mean(-1) + eps)


class Dense(nn.Module):
    """y = x W + b with W shaped [in..., out...] by an einsum spec (b optional)."""

    shape: tuple[int, ...]
    bias_shape: tuple[int, ...]
    equation: str
    mm: Matmul = Matmul()
    use_bias: bool = True

    @nn.compact
    def __call__(self, x):
        kernel = param(self, "kernel", init, self.shape)
        y = self.mm(self.equation, x, kernel)
        if self.use_bias:
            y = y + param(self, "bias", nn.initializers.zeros, self.bias_shape)
        return y
