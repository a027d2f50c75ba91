"""ModelConfig.qk_norm (Qwen3's q_norm/k_norm): each head's query and key pass the
model's RMSNorm over head_dim, then RoPE; checked on one attention layer against a
float64 numpy reference written from HF's Qwen3Attention (no torch, no checkpoint)."""

from __future__ import annotations

import jax
import numpy as np

from jaxattn.config import tiny
from jaxattn.engine.attention import SelfAttention
from jaxattn.positions import Rotary

T, D, H, KV, K, EPS = 7, 15, 4, 2, 6, 1e-5


def _rms(x, w):  # over the last axis, float64
    return x / np.sqrt(np.mean(x**2, -1, keepdims=True) + EPS) * w


def _rope(x, theta=10000.0):  # x [T, n, K], HF's rotate_half layout, float64
    inv = 1.0 / theta ** (np.arange(0, K, 2) / K)
    angles = np.arange(x.shape[0])[:, None] * np.concatenate([inv, inv])[None]
    cos, sin = np.cos(angles)[:, None], np.sin(angles)[:, None]
    half = np.concatenate([-x[..., K // 2 :], x[..., : K // 2]], -1)
    return x * cos + half * sin


def test_queries_and_keys_are_normed_per_head_before_rope():
    c = tiny(
        family="llama",
        hidden_size=D,
        num_heads=H,
        num_kv_heads=KV,
        head_size=K,
        norm="pre",
        norm_type="rms",
        norm_bias=False,
        layer_norm_eps=EPS,
        causal=True,
        qk_norm=True,
        rotary=Rotary(),
        absolute_positions=False,
        type_vocab_size=0,
        embedding_norm=False,
    )
    rng = np.random.default_rng(0)
    x = rng.normal(size=(T, D)).astype(np.float32)
    mask = np.ones(T, bool)
    module = SelfAttention(c)
    params = module.init(jax.random.PRNGKey(0), x, mask)["params"]
    params = jax.tree.map(lambda a: rng.normal(size=a.shape).astype(np.float32), params)
    assert params["query_norm"]["scale"].shape == params["key_norm"]["scale"].shape == (K,)
    _, parts = module.apply({"params": params}, x, mask)
    x64 = x.astype(np.float64)
    for name, proj, got in (("query", "query", parts.q), ("key", "key", parts.k)):
        p = {k: np.asarray(v, np.float64) for k, v in params[proj].items()}
        raw = np.einsum("td,dhk->thk", x64, p["kernel"]) + p["bias"]
        want = _rope(_rms(raw, np.asarray(params[f"{name}_norm"]["scale"], np.float64)))
        np.testing.assert_allclose(np.asarray(got), want, atol=2e-5, rtol=0, err_msg=name)
    # Without the switch there is no norm.
    plain = SelfAttention(tiny(**{**c.to_dict(), "qk_norm": False, "rotary": Rotary()}))
    assert "query_norm" not in plain.init(jax.random.PRNGKey(0), x, mask)["params"]
