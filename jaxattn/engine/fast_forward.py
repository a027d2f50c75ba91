"""The forward of a layer nothing is captured from: its attention output alone.

    kind = fast_forward.choose("auto", config, mm, length, gated=False)
    y = fast_forward.attend(kind, q, k, v, mask, config=config, mm=mm, local=False)

A layer whose weights nobody asked for (a layer before the captured ones, or a
captured layer asked only for what reads no weight, `READS_NO_WEIGHTS`) needs
softmax(q k^T) v and nothing else: no [H, T, S] scores or weights kept for the
capture. `choose` is the one place that picks how such a layer runs:

- "cudnn": cuDNN flash attention, memory linear in T. On a CUDA GPU at compute
  precision bf16, for a head dim that is a multiple of 8 up to 128, no soft cap, and
  no window or a causal one.
- "blockwise": `jaxattn.engine.blockwise`'s forward, memory linear in T. Where T is
  long (`blockwise.AUTO_MIN_LENGTH` or more: below it XLA's is faster on the CPU, and a
  layer's [H, T, T] logits are small), on any platform; and Gemma 2's soft cap at any
  length.
- "xla": XLA's dense `jax.nn.dot_product_attention`, [H, T, S] logits. Short inputs,
  at highest precision or a precision the platform has natively.
- None: the layer's own path (dense, or blockwise as the request's `block` says).

None where `jax.nn.dot_product_attention` and the blockwise forward cannot give the
dense path's numbers: attention="dense" (the reference: every layer dense), heads
ablated (uniform heads), relative positions (DeBERTa's score terms), and for "xla"
a precision the platform emulates (tf32/bf16 on the CPU round every operand, the
weights too). Gemma 2's soft cap, which `jax.nn.dot_product_attention` cannot
express, runs blockwise at any length rather than cuDNN or XLA. No family here
uses ALiBi or another additive bias.

cuDNN takes bf16 operands only, so it serves compute precision "bf16" (whose dense
path rounds the operands to bf16 too); at "highest" and "tf32" a GPU layer runs
"xla" (or "blockwise" where T is long) under that precision, the same numbers as
the dense path. cuDNN sees the padding as each example's key length (host.pack
pads on the right: the real tokens are a prefix), a causal model's future as its
causal mask, and a decoder's sliding window 0 <= i - j < W as its left window;
ModernBERT's symmetric window |i - j| <= W // 2 (not causal) it cannot express, so
ModernBERT never runs cuDNN. A padded query row that sees no key (past a window)
comes out 0 from cuDNN where the dense path lets it see itself; padded rows are
no part of any output and no real row reads them. Where jax refuses the cuDNN call
while tracing (no cuDNN, a shape it does not take), the layer warns and runs "xla" or
the blockwise forward as a CPU would.

"xla" applies `blockwise.allowed`, the mask the blockwise path and the dense path
apply (padding, causal, window, a padded query seeing itself), as a boolean mask,
with the matmuls at the engine's precision (`Matmul.default_precision`).
"""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxattn.config import ModelConfig
from jaxattn.engine import blockwise
from jaxattn.engine.precision import Matmul

KINDS = ("cudnn", "blockwise", "xla")
# The per-layer captures that read no attention weight: a layer asked only for these
# (or nothing) runs its attention through `choose`'s kind.
READS_NO_WEIGHTS = frozenset({"queries", "keys", "values", "fx_norm"})
CUDNN_HEAD_DIM = 128  # cuDNN flash attention's largest head dim before Hopper (256 from it)


def choose(policy: str, config: ModelConfig, mm: Matmul, length: int, gated: bool):
    """How a layer nothing is captured from runs its attention: a `KINDS` name, or None
    for the layer's own path (module docstring).

    Args:
      policy: the engine's attention policy (`blockwise.POLICIES`).
      config: the model.
      mm: the engine's contraction (its precision and platform).
      length: the padded length T.
      gated: heads are ablated.
    """
    if policy == "dense" or gated or config.relative is not None:
        return None
    if cudnn_serves(config, mm):
        return "cudnn"
    if length >= blockwise.AUTO_MIN_LENGTH or config.attn_softcap:
        return "blockwise"
    if mm.default_precision() is not None:
        return "xla"
    return None


def cudnn_serves(config: ModelConfig, mm: Matmul) -> bool:
    """Whether cuDNN flash attention computes this model's attention at `mm`'s precision
    (module docstring)."""
    if mm.platform != "gpu" or mm.precision != "bf16" or not _cuda():
        return False
    if config.attn_softcap or config.relative is not None:
        return False
    if config.head_dim % 8 or config.head_dim > CUDNN_HEAD_DIM:
        return False
    window = config.rotary.local_window if config.rotary is not None else 0
    return not window or config.causal


@functools.cache
def _cuda() -> bool:
    """Whether jax's GPU backend is CUDA (cuDNN), not ROCm."""
    try:
        return "cuda" in jax.devices("gpu")[0].client.platform_version.lower()
    except (RuntimeError, AttributeError, IndexError):
        return False


def scale(config: ModelConfig) -> float:
    """The logits' factor (`attention.logits` without the soft cap)."""
    if config.query_scale:
        return float(np.float32(config.query_scale**-0.5))
    return float(1.0 / np.sqrt(config.head_dim))


def attend(
    kind: str, q, k, v, mask, *, config: ModelConfig, mm: Matmul, local=False, block=blockwise.BLOCK
):
    """One example's attention output [T, H, K] by `kind` "cudnn" or "xla".

    Args:
      q: [T, H, K] queries; k, v: [T, H_kv, K] (rotated where the model rotates).
      mask: [T] bool, the real tokens (a prefix).
      local: a local layer (a bool, or a traced one in a scan).
      block: the blockwise forward's block size, where cuDNN refuses a long input (the
        engine's `attention_block`).
    """
    window = config.rotary.local_window if config.rotary is not None else 0
    if kind == "xla":
        return _xla(q, k, v, mask, config, mm, window, local)
    if kind != "cudnn":
        raise RuntimeError(f"unknown fast forward {kind!r}: valid are cudnn, xla")
    try:
        if not window or local is False:
            return _cudnn(q, k, v, mask, config, 0)
        if local is True:
            return _cudnn(q, k, v, mask, config, window)
        return lax.cond(
            local,
            lambda: _cudnn(q, k, v, mask, config, window),
            lambda: _cudnn(q, k, v, mask, config, 0),
        )
    except (NotImplementedError, ValueError, RuntimeError) as e:  # refused while tracing
        warnings.warn(f"cuDNN attention refused ({e}); this layer runs without it", stacklevel=2)
        if q.shape[0] < blockwise.AUTO_MIN_LENGTH:
            return _xla(q, k, v, mask, config, mm, window, local)
        logits = functools.partial(jnp.multiply, scale(config))
        return blockwise.attention(
            q,
            k,
            v,
            mask,
            mm=mm,
            logits=logits,
            causal=config.causal,
            window=window,
            local=local,
            block=block,
        ).out


def _xla(q, k, v, mask, config: ModelConfig, mm: Matmul, window: int, local):
    positions = jnp.arange(q.shape[0])
    allowed = blockwise.allowed(positions, positions, mask, config.causal, window, local)
    with jax.default_matmul_precision(mm.default_precision()):
        return jax.nn.dot_product_attention(
            q, k, v, mask=allowed[None], scale=scale(config), implementation="xla"
        )


def _cudnn(q, k, v, mask, config: ModelConfig, window: int):
    bf16 = jnp.bfloat16
    out = jax.nn.dot_product_attention(
        q.astype(bf16),
        k.astype(bf16),
        v.astype(bf16),
        scale=scale(config),
        is_causal=config.causal,
        key_value_seq_lengths=mask.sum(dtype=jnp.int32)[None],
        local_window_size=(window - 1, 0) if window else None,
        implementation="cudnn",
    ).astype(q.dtype)
    return jnp.where(jnp.isfinite(out), out, 0)  # a padded row that sees no key
