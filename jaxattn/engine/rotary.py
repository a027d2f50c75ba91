"""Rotary positions (ModernBERT, Llama) and local windows (Warner et al. 2024), per example, as HF.

RoPE (Su et al. 2021) in HF's "rotate_half" layout: a query or key x of one
head (width K, even) at position t becomes

    x' = x * cos(t w) + rotate_half(x) * sin(t w),   rotate_half([a, b]) = [-b, a]

with a and b the first and second halves of x, and w = [f, f] the inverse
frequencies f_i = 1 / theta^(2i / K), i < K / 2, repeated for both halves
(transformers/models/modernbert/modeling_modernbert.py:
ModernBertRotaryEmbedding.compute_default_rope_parameters and forward,
rotate_half, apply_rotary_pos_emb). Global layers use `global_rope_theta`,
local ones `local_rope_theta` (HF rope_parameters["full_attention"] and
["sliding_attention"]). Layer l is global when l % global_attn_every_n_layers
== 0; a local layer's query i attends only to keys j with
|i - j| <= local_attention // 2 (masking_utils.sliding_window_bidirectional_overlay
with config.sliding_window = local_attention // 2); every other pair gets
exactly zero weight.

Llama rotates q and k the same way in every layer, with `rope_theta` and its
rope type's frequency scaling (`scaled_frequencies`: "linear", "llama3").
Mistral, Qwen2, Qwen3 and Gemma do too; their sliding layers are local layers
whose window is causal: query i sees keys i - W < j <= i (`window_mask` with
causal=True; HF's sliding_window_causal_mask_function).

GPT-NeoX (Pythia) rotates part of each head (`Rotary.partial`, HF rotary_pct): the
frequencies are those of dims = int(K * partial) dimensions, 1 / theta^(2i / dims),
and the first 2 ceil(dims / 2) dimensions are rotated (HF's cos/sin are twice the
frequencies wide: an odd dims rotates one dimension more than it names), the rest
pass unrotated (HF modeling_gpt_neox.py: GPTNeoXRotaryEmbedding, apply_rotary_pos_emb).

Float32 as torch: f, the angles t * f and their cos/sin are float32. f is
computed with the C library's float32 powf, as torch's scalar loop does, so
it equals torch's f bit for bit when K / 2 is below the CPU's vector width
(K <= 14) and for ModernBERT's real K = 64; torch's vectorised powf (SLEEF,
1 ulp) can differ by up to two ulps for other widths (e.g. K = 48, 128 at
theta 160000), which moves an angle by at most t * 2^-22 * f (torch's own
result depends on the CPU's vector unit). cos/sin are rounded from float64:
within one ulp (6e-8) of torch's float32 cos/sin of the same angle.

Everything here works on ONE example (no batch axis); the engine vmaps. The
angles and the window depend only on the (static) padded length, so they are
computed in numpy at trace time and enter the program as constants.

Shape legend: T positions, H heads, K head dim.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from jaxattn.errors import CheckpointError
from jaxattn.positions import rotated_width

__all__ = [
    "apply_rotary",
    "in_window",
    "inverse_frequencies",
    "is_global_layer",
    "rope_angles",
    "rotated_width",
    "scaled_frequencies",
    "window_mask",
]


def inverse_frequencies(head_dim: int, theta: float, dims: int | None = None) -> np.ndarray:
    """HF's inv_freq [ceil(dims / 2)] float32: 1 / theta^(arange(0, dims, 2) / dims).

    dims: a partial rotation's (GPT-NeoX's rotary_ndims, `Rotary.dims`), which may be
    odd; None: the whole head, head_dim, which must be even.
    """
    if dims is None:
        if head_dim < 2 or head_dim % 2:
            raise CheckpointError(f"rotary head_dim {head_dim} must be even and at least 2")
        dims = head_dim
    if dims < 1 or rotated_width(dims) > head_dim:
        raise CheckpointError(
            f"rotary dims {dims} must be at least 1, and rotate at most the head's "
            f"{head_dim} dimensions (2 ceil(dims / 2) of them)"
        )
    if not theta > 0:
        raise CheckpointError(f"rope theta {theta} must be positive")
    exponent = np.arange(0, dims, 2, dtype=np.float32) / np.float32(dims)
    # torch: a float32 power (SLEEF, within 1 ulp), then a float32 division. The power is
    # taken in float64 and rounded once (numpy's own float32 power differs across versions).
    power = np.power(np.float64(np.float32(theta)), exponent.astype(np.float64)).astype(np.float32)
    return np.float32(1.0) / power


def scaled_frequencies(inv_freq: np.ndarray, scaling: tuple) -> np.ndarray:
    """HF's rope_type scalings of inv_freq [K / 2] float32 (`ModelConfig.rotary.scaling`).

    scaling: () (default: unchanged), or (type, factor, low_freq_factor,
    high_freq_factor, original_max_positions) with type
    * "linear": inv_freq / factor (HF _compute_linear_scaling_rope_parameters);
    * "llama3": HF _compute_llama3_parameters, in float32 as torch: with
      wavelen = 2 pi / inv_freq, frequencies whose wavelength exceeds
      original / low_freq_factor are divided by factor, those below
      original / high_freq_factor kept, and the band between interpolated,
      (1 - s) inv_freq / factor + s inv_freq, s = (original / wavelen - low) / (high - low).
    Neither scales cos/sin (HF's attention_factor is 1 for both).
    """
    if not scaling:
        return inv_freq
    kind, factor, low, high, original = scaling
    f32 = np.float32
    if kind == "linear":
        return (inv_freq / f32(factor)).astype(f32)
    if kind != "llama3":
        raise RuntimeError(f"unknown rope scaling {kind!r}")  # Rotary checks its scaling
    # torch: python-scalar / tensor is reciprocal(tensor) * scalar, in float32.
    wavelen = ((f32(1) / inv_freq) * f32(2 * np.pi)).astype(f32)
    low_wavelen, high_wavelen = original / low, original / high
    scaled = np.where(wavelen > low_wavelen, inv_freq / f32(factor), inv_freq).astype(f32)
    smooth = (((f32(1) / wavelen) * f32(original) - f32(low)) / f32(high - low)).astype(f32)
    smoothed = ((f32(1) - smooth) * scaled / f32(factor) + smooth * scaled).astype(f32)
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(f32)


@functools.lru_cache(maxsize=64)
def _angles(
    length: int, head_dim: int, theta: float, scaling: tuple = (), dims: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    inv_freq = scaled_frequencies(inverse_frequencies(head_dim, theta, dims), scaling)
    freqs = np.arange(length, dtype=np.float32)[:, None] * inv_freq
    emb = np.concatenate([freqs, freqs], axis=-1).astype(np.float64)  # [T, W], float32 values
    cos, sin = np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)
    cos.flags.writeable = sin.flags.writeable = False  # cached: shared by every caller
    return cos, sin


def rope_angles(
    length: int, head_dim: int, theta: float, scaling: tuple = (), dims: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin), each [T, W] float32, of positions 0..T-1 (HF's rotary embedding), the
    frequencies scaled by `scaling` (`scaled_frequencies`; () none); W = K, or a partial
    rotation's `rotated_width(dims)` (`inverse_frequencies`)."""
    dims = None if dims is None else int(dims)
    return _angles(int(length), int(head_dim), float(theta), tuple(scaling), dims)


def rotate_half(x):
    """[a, b] -> [-b, a] over the last axis (a, b its halves)."""
    half = x.shape[-1] // 2
    return jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rotary(x, cos, sin):
    """x [T, H, K] rotated by (cos, sin) [T, W]: HF apply_rotary_pos_emb (float32). A
    partial rotation (W < K, GPT-NeoX) turns x's first W dimensions and passes the rest
    (HF's q_rot, q_pass)."""
    width = cos.shape[-1]
    if width < x.shape[-1]:
        rotated = apply_rotary(x[..., :width], cos, sin)
        return jnp.concatenate([rotated, x[..., width:]], axis=-1)
    x32 = jnp.asarray(x, jnp.float32)
    c = jnp.asarray(cos, jnp.float32)[:, None, :]
    s = jnp.asarray(sin, jnp.float32)[:, None, :]
    return (x32 * c + rotate_half(x32) * s).astype(jnp.result_type(x))


def window_mask(length: int, window: int, causal: bool = False) -> np.ndarray:
    """[T, T] bool: query i may attend key j in a local layer, |i - j| <= window // 2.

    `window` is HF's local_attention (the whole window, both sides and the
    query itself); HF's eager mask adds the dtype's minimum to every other
    pair, which the softmax turns into exactly zero weight. causal: `window` is
    HF's sliding_window of a decoder (Mistral, Qwen2/3, Gemma;
    masking_utils.sliding_window_causal_mask_function): key j is seen when
    0 <= i - j < window, the query and window - 1 keys before it.
    """
    if window < 0:
        raise CheckpointError(f"local window {window} must not be negative")
    pos = np.arange(length)
    return in_window(pos[:, None] - pos[None, :], window, causal)


def in_window(back, window: int, causal: bool = False):
    """`window_mask` of the offsets back = i - j (numpy or jax, any shape): the one
    definition the dense [T, T] mask and the blockwise path's blocks
    (`jaxattn.engine.blockwise`) share."""
    if causal:
        return (back >= 0) & (back < window)
    return abs(back) <= window // 2


def is_global_layer(layer: int, every: int) -> bool:
    """Whether layer `layer` attends globally: layer % every == 0 (HF's layer_types)."""
    if every < 1:
        raise CheckpointError(f"global_attn_every_n_layers {every} must be at least 1")
    return layer % every == 0
