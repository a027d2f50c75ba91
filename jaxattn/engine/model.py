"""The Flax (linen) BERT-family encoder, per example, with declared capture.

Why linen: inference here is a pure function of (params, inputs), vmapped over
the batch and jitted per static `CaptureSpec`. linen's ``apply`` is exactly that
function, and its params are a plain pytree that conversion writes, orbax
saves and jit replicates, with no module state to split or merge.

Every module works on ONE example (shapes below carry no batch axis); the engine
vmaps. Capture is declared once by a `CaptureSpec` and returned as one dict of
stacked arrays; layers past the deepest captured one are never run, and a
quantity not asked for is never computed.

Shape legend: T query positions, S key positions (both the padded length), H
heads, K head dim, D model dim, F feed-forward dim.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxattn.config import ModelConfig
from jaxattn.engine import head_stats, norms
from jaxattn.engine.precision import Matmul
from jaxattn.quantities import QUANTITIES
from jaxattn.spec import CaptureSpec

_init = nn.initializers.normal(0.02)


def _activation(name: str):
    if name == "gelu":
        # HF "gelu" is the exact erf gelu; jax.nn.gelu defaults to the tanh form.
        return lambda x: jax.nn.gelu(x, approximate=False)
    if name == "gelu_tanh":
        return lambda x: jax.nn.gelu(x, approximate=True)
    return jax.nn.relu


class LayerNorm(nn.Module):
    """LayerNorm with the two-pass variance torch uses.

    flax.linen.LayerNorm defaults to E[x^2] - E[x]^2 (use_fast_variance), which
    loses precision against the reference; this computes E[(x - mean)^2].
    """

    eps: float

    @nn.compact
    def __call__(self, x):
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],))
        bias = self.param("bias", nn.initializers.zeros, (x.shape[-1],))
        mean = x.mean(-1, keepdims=True)
        var = jnp.square(x - mean).mean(-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + self.eps) * scale + bias


class Dense(nn.Module):
    """y = x W + b with W shaped [in..., out...] by an einsum spec."""

    shape: tuple[int, ...]
    bias_shape: tuple[int, ...]
    equation: str
    mm: Matmul = Matmul()

    @nn.compact
    def __call__(self, x):
        kernel = self.param("kernel", _init, self.shape)
        bias = self.param("bias", nn.initializers.zeros, self.bias_shape)
        return self.mm(self.equation, x, kernel) + bias


class Embeddings(nn.Module):
    config: ModelConfig

    @nn.compact
    def __call__(self, ids, type_ids):  # [T], [T] -> [T, D]
        c = self.config
        x = self.param("word", _init, (c.vocab_size, c.hidden_size))[ids]
        # RoBERTa numbers positions from padding_idx + 1 (position_offset = 2).
        positions = jnp.arange(ids.shape[0]) + c.position_offset
        x = x + self.param("position", _init, (c.max_positions, c.hidden_size))[positions]
        if c.type_vocab_size:
            x = x + self.param("token_type", _init, (c.type_vocab_size, c.hidden_size))[type_ids]
        return LayerNorm(c.layer_norm_eps, name="ln")(x)


class SelfAttention(nn.Module):
    """Multi-head self-attention; also returns the parts the capture needs."""

    config: ModelConfig
    mm: Matmul = Matmul()

    @nn.compact
    def __call__(self, x, mask, gate=None, project: bool = True):
        """x [T, D], mask [S] -> (y [T, D] or None, parts).

        gate: None, or (keep [H] float, uniform [H] bool) for head ablation
        (Kovaleva et al. 2019): a head with keep 0 contributes nothing; a
        uniform head attends equally to every real key.
        project: False skips the weighted sum and the output projection (y is
        None) when only the captured parts are wanted.
        """
        c = self.config
        hk = (c.num_heads, c.head_dim)
        proj = dict(shape=(c.hidden_size, *hk), bias_shape=hk, equation="TD,DHK->THK", mm=self.mm)
        q = Dense(**proj, name="query")(x)  # [T, H, K]
        k = Dense(**proj, name="key")(x)
        v = Dense(**proj, name="value")(x)
        scores = self.mm("THK,SHK->HTS", q, k) / jnp.sqrt(c.head_dim)
        # Padded keys get exactly zero weight: exp(-inf) == 0.
        alpha = jax.nn.softmax(jnp.where(mask[None, None, :], scores, -jnp.inf), axis=-1)
        if gate is not None:
            keep, uniform = gate
            flat = jnp.broadcast_to(mask / mask.sum(), alpha.shape[1:])  # [T, S]
            alpha = jnp.where(uniform[:, None, None], flat[None], alpha)
        out = Dense((*hk, c.hidden_size), (c.hidden_size,), "THK,HKD->TD", self.mm, name="out")
        y = None
        if project:
            context = self.mm("HTS,SHK->THK", alpha, v)
            if gate is not None:
                context = context * keep[None, :, None]
            y = out(context)
        w_out = self.variables["params"]["out"]["kernel"]  # [H, K, D]
        return y, dict(q=q, k=k, v=v, scores=scores, alpha=alpha, w_out=w_out)


def _capture_layer(want, p: dict, x, gamma, std, mm: Matmul, mask, classes) -> dict:
    """The requested per-layer quantities of one example, all heads.

    Shapes out: attention/scores/alpha_fx_norm [H, T, S]; queries/keys/values
    [H, T, K]; fx_norm [H, S]; sum_alpha_fx_norm, attn_res_norm and
    attn_res_ln_norm [T, S]; head_stats, norm_head_stats [H, N].
    """
    cap = {}
    alpha, v, w_out = p["alpha"], p["v"], p["w_out"]
    for name, t in (("attention", alpha), ("scores", p["scores"])):
        if name in want:
            cap[name] = t
    for name, t in (("queries", p["q"]), ("keys", p["k"]), ("values", v)):
        if name in want:
            cap[name] = t.transpose(1, 0, 2)  # [T, H, K] -> [H, T, K]
    if want & {"fx_norm", "alpha_fx_norm", "norm_head_stats"}:
        fxn = norms.fx_norm(v, w_out, mm)  # [H, S]
        if "fx_norm" in want:
            cap["fx_norm"] = fxn
        if "alpha_fx_norm" in want:
            cap["alpha_fx_norm"] = norms.alpha_fx_norm(alpha, fxn)
        if "norm_head_stats" in want:
            weights = head_stats.normalise_rows(norms.alpha_fx_norm(alpha, fxn))
            cap["norm_head_stats"] = head_stats.head_statistics(weights, mask, classes)
    if "head_stats" in want:
        cap["head_stats"] = head_stats.head_statistics(alpha, mask, classes)
    if "sum_alpha_fx_norm" in want:
        cap["sum_alpha_fx_norm"] = norms.sum_alpha_fx_norm(alpha, v, w_out, mm)
    if "attn_res_norm" in want:
        cap["attn_res_norm"] = norms.residual_norm(alpha, v, w_out, x, mm)
    if "attn_res_ln_norm" in want:
        cap["attn_res_ln_norm"] = norms.residual_ln_norm(alpha, v, w_out, x, gamma, std, mm)
    return cap


class EncoderLayer(nn.Module):
    """Post-LN transformer layer: LN(x + attn(x)), then LN(h + ffn(h))."""

    config: ModelConfig
    mm: Matmul = Matmul()

    @nn.compact
    def __call__(self, x, mask, want: frozenset[str], gate=None, output: bool = True,
                 classes=None):  # fmt: skip
        """x [T, D] -> (the layer's output [T, D], or None when not `output`; captures).

        output=False (the last layer run, when its output is not captured) skips
        what only the output needs: the weighted sum and output projection
        (unless attn_res_ln_norm needs the pre-LN statistics) and the FFN.
        """
        c = self.config
        project = output or "attn_res_ln_norm" in want
        a, parts = SelfAttention(c, self.mm, name="attention")(x, mask, gate, project)
        cap, std = {}, None
        if project:
            y = x + a
            # The LN decomposition (attn_res_ln_norm) fixes the real pre-LN statistics.
            std = jnp.sqrt(jnp.square(y - y.mean(-1, keepdims=True)).mean(-1) + c.layer_norm_eps)
        if want:
            gamma = self.variables["params"]["attention_ln"]["scale"]
            cap = _capture_layer(want, parts, x, gamma, std, self.mm, mask, classes)
        if not output:
            return None, cap
        h = LayerNorm(c.layer_norm_eps, name="attention_ln")(y)
        d, f = c.hidden_size, c.intermediate_size
        u = _activation(c.activation)(Dense((d, f), (f,), "TD,DF->TF", self.mm, name="ffn_in")(h))
        out = Dense((f, d), (d,), "TF,FD->TD", self.mm, name="ffn_out")(u)
        return LayerNorm(c.layer_norm_eps, name="ffn_ln")(h + out), cap


class Encoder(nn.Module):
    """Embeddings and layers of one example; returns the captured quantities.

    ``__call__(ids [T], type_ids [T], mask [T] bool, spec)`` returns a dict
    name -> array with the spec's layers stacked first and heads selected:
    e.g. attention [L, H, T, S], hidden_states [L+1, T, D]. Every contraction
    runs at `spec.precision` (`jaxattn.engine.precision`) on `platform`.
    """

    config: ModelConfig
    platform: str = "cpu"

    @nn.compact
    def __call__(self, ids, type_ids, mask, spec: CaptureSpec, gates=None, classes=None):
        """gates: None, or (keep [L, H] float, uniform [L, H] bool); see SelfAttention.

        classes: [T] int8 token-class bits (`jaxattn.token_classes.class_bits`),
        needed by head_stats and norm_head_stats.
        """
        c = self.config
        want = frozenset(spec.what)
        mm = Matmul(spec.precision, self.platform)
        heads = jnp.asarray(spec.heads) if len(spec.heads) < c.num_heads else None
        x = Embeddings(c, name="embeddings")(ids, type_ids)
        per_layer: dict[str, list] = {name: [] for name in spec.what}
        if "hidden_states" in want:
            per_layer["hidden_states"].append(x)
        for layer in range(spec.last_layer + 1):
            captured = layer in spec.layers
            gate = None if gates is None else (gates[0][layer], gates[1][layer])
            # The last layer's output is only needed when it is captured.
            output = layer < spec.last_layer or "hidden_states" in want
            x, cap = EncoderLayer(c, mm, name=f"layer_{layer}")(
                x,
                mask,
                want - {"hidden_states"} if captured else frozenset(),
                gate,
                output,
                classes,
            )
            if not captured:
                continue
            for name, t in cap.items():
                if heads is not None and QUANTITIES[name].axes.startswith("LH"):
                    t = t[heads]
                per_layer[name].append(t)
            if "hidden_states" in want:
                per_layer["hidden_states"].append(x)
        return {name: jnp.stack(ts) for name, ts in per_layer.items()}
