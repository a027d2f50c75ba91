"""The blockwise attention path (`jaxattn.engine.blockwise`) against a float64 numpy softmax
and the dense statistics: odd block sizes, padding, causal and windowed masks, GQA, soft cap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxattn.engine import blockwise, head_stats
from jaxattn.engine.precision import Matmul
from jaxattn.token_classes import CLS_BIT, PUNCT_BIT, SEP_BIT

K = 4


def reference(q, k, v, mask, causal, window, local, cap=None):
    """float64 softmax(q k^T / sqrt K) v with the masks spelled out pair by pair."""
    t, h, _ = q.shape
    group = h // k.shape[1]
    kk = np.repeat(k, group, axis=1).astype(np.float64)
    vv = np.repeat(v, group, axis=1).astype(np.float64)
    s = np.einsum("thk,shk->hts", q.astype(np.float64), kk) / np.sqrt(K)
    if cap:
        s = np.tanh(s / cap) * cap
    ok = np.zeros((t, t), bool)
    for i in range(t):
        for j in range(t):
            seen = bool(mask[j]) and (j <= i or not causal)
            if local:
                inside = 0 <= i - j < window if causal else abs(i - j) <= window // 2
                seen = (seen and inside) or i == j
            ok[i, j] = seen
    s = np.where(ok[None], s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    lse = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1)) + s.max(-1)
    return np.einsum("hts,shk->thk", w, vv), lse, w


def logits_of(cap=None):
    def f(x):
        x = x / jnp.sqrt(K)
        return jnp.tanh(x / cap) * cap if cap else x

    return f


CASES = {
    # name: (T, heads, kv heads, block, causal, window, local, padded, cap)
    "encoder odd block": (37, 3, 3, 8, False, 0, False, 0, None),
    "padding": (37, 3, 3, 10, False, 0, False, 6, None),
    "causal gqa": (29, 6, 2, 7, True, 0, False, 4, None),
    "encoder window": (33, 2, 2, 5, False, 9, True, 3, None),
    "decoder window": (31, 4, 2, 6, True, 5, True, 2, None),
    "soft cap": (23, 2, 1, 16, True, 0, False, 0, 0.7),
    "one block": (9, 2, 2, 32, False, 0, False, 2, None),
}


def inputs(t, h, kv, padded, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(t, h, K)).astype(np.float32) * 2
    k = rng.normal(size=(t, kv, K)).astype(np.float32) * 2
    v = rng.normal(size=(t, kv, K)).astype(np.float32)
    mask = np.arange(t) < t - padded
    return q, k, v, mask


@pytest.mark.parametrize("case", CASES)
def test_blockwise_equals_the_softmax(case):
    t, h, kv, block, causal, window, local, padded, cap = CASES[case]
    q, k, v, mask = inputs(t, h, kv, padded)
    r = blockwise.attention(
        q,
        k,
        v,
        mask,
        mm=Matmul(),
        logits=logits_of(cap),
        causal=causal,
        window=window,
        local=local,
        block=block,
    )
    out, lse, _ = reference(q, k, v, mask, causal, window, local, cap)
    assert r.out.shape == (t, h, K) and r.lse.shape == (h, t)
    np.testing.assert_allclose(np.asarray(r.out), out, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(np.asarray(r.lse), lse, rtol=1e-5, atol=2e-6)


def test_a_traced_layer_kind_takes_either_mask():
    q, k, v, mask = inputs(25, 2, 2, 3)

    @jax.jit
    def run(local):
        kw = dict(mm=Matmul(), logits=logits_of(), window=7, local=local, block=6)
        return blockwise.attention(q, k, v, mask, **kw).out

    for local in (True, False):
        out, _, _ = reference(q, k, v, mask, False, 7, local)
        np.testing.assert_allclose(np.asarray(run(jnp.bool_(local))), out, rtol=1e-5, atol=2e-6)


def classes_of(t, padded, rng):
    c = np.where(rng.random(t) < 0.3, PUNCT_BIT, 0).astype(np.int8)
    c[0] |= CLS_BIT
    c[t - padded - 1] |= SEP_BIT
    c[t // 2] |= SEP_BIT
    return c


@pytest.mark.parametrize("case", ["padding", "encoder window", "causal gqa", "decoder window"])
def test_statistics_from_the_blocks_equal_the_dense_ones(case):
    t, h, kv, block, causal, window, local, padded, cap = CASES[case]
    q, k, v, mask = inputs(t, h, kv, padded, seed=1)
    classes = classes_of(t, padded, np.random.default_rng(2))
    kind = "decoder" if causal else "encoder"
    r = blockwise.attention(
        q,
        k,
        v,
        mask,
        mm=Matmul(),
        logits=logits_of(cap),
        causal=causal,
        window=window,
        local=local,
        block=block,
        stats=kind,
        classes=classes,
    )
    _, _, w = reference(q, k, v, mask, causal, window, local, cap)
    w = jnp.asarray(w, jnp.float32)
    if causal:
        got = head_stats.decoder_statistics_from_rows(r.terms, mask)
        want = head_stats.decoder_statistics(w, mask, classes)
    else:
        got = head_stats.encoder_statistics_from_rows(r.terms, mask, classes)
        want = head_stats.head_statistics(w, mask, classes)
    assert not np.isnan(np.asarray(want)).all()
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-6)
