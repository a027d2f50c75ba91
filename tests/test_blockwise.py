"""The blockwise attention path (`jaxattn.engine.blockwise`) against a float64 numpy softmax
and the dense statistics: odd block sizes, padding, causal and windowed masks, GQA, soft cap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_models import softmax_reference

from jaxattn.engine import blockwise, head_stats, norms
from jaxattn.engine.precision import Matmul
from jaxattn.token_classes import CLS_BIT, PUNCT_BIT, SEP_BIT

K = 4


def reference(q, k, v, mask, causal, window, local, cap=None):
    """float64 softmax(q k^T / sqrt K) v (`tiny_models.softmax_reference`)."""
    return softmax_reference(q, k, v, mask, causal, window, local, 1 / np.sqrt(K), cap)


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


def test_a_block_over_t_runs_as_one_t_by_t_block():
    """attention_block over the padded length: one T x T block, the working memory of
    block=T (what the attention budget counts), not H x block^2 x 4 bytes (16 MiB at
    1,024); the forward and a map from the blocks are the float64 reference's."""
    t, h, kv = 23, 4, 2
    q, k, v, mask = inputs(t, h, kv, 3, seed=7)

    def compiled(block):
        def f(q, k, v, mask):
            kw = dict(mm=Matmul(), logits=logits_of(), causal=True, block=block)
            r = blockwise.attention(q, k, v, mask, **kw)
            return r.out, blockwise.captures(r.inputs, {"attention"}, heads=(1,))["attention"]

        program = jax.jit(f).lower(q, k, v, mask).compile()
        return program.memory_analysis().temp_size_in_bytes, program(q, k, v, mask)

    at_t, _ = compiled(t)
    big, (out, attention) = compiled(1024)
    assert big == at_t < h * 64 * 64 * 4, (big, at_t)
    want, _, w = reference(q, k, v, mask, True, 0, False)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(np.asarray(attention), w[[1]], rtol=1e-5, atol=2e-6)


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


def captures(inputs, want, **kw):
    """`blockwise.captures` as one program (the test's time is compiles)."""
    heads = kw.pop("heads", None)

    @jax.jit
    def f(inputs, kw):
        return blockwise.captures(inputs, want, heads=heads, **kw)

    return f(inputs, kw)


def run(case, seed=1):
    """The case's inputs, its float64 reference weights and its blockwise forward."""
    t, h, kv, block, causal, window, local, padded, cap = CASES[case]
    q, k, v, mask = inputs(t, h, kv, padded, seed=seed)
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
    return (q, k, v, mask), reference(q, k, v, mask, causal, window, local, cap)[2], r


STATISTICS = {  # case: the statistics asked for (an encoder may ask for both in one pass)
    "padding": ("head_stats", "decoder_head_stats"),
    "encoder window": ("head_stats",),
    "causal gqa": ("decoder_head_stats",),
    "decoder window": ("decoder_head_stats",),
}


@pytest.mark.parametrize("case", STATISTICS)
def test_statistics_from_the_blocks_equal_the_dense_ones(case):
    t, h, kv, block, causal, window, local, padded, cap = CASES[case]
    (q, k, v, mask), w, r = run(case)
    classes = classes_of(t, padded, np.random.default_rng(2))
    got = captures(r.inputs, STATISTICS[case], classes=classes)
    assert got.keys() == set(STATISTICS[case])
    w = jnp.asarray(w, jnp.float32)
    for name, terms in got.items():
        if name == "decoder_head_stats":
            blocked = head_stats.decoder_statistics_from_rows(terms, mask)
            dense = head_stats.decoder_statistics(w, mask, classes, causal)
        else:
            blocked = head_stats.encoder_statistics_from_rows(terms, mask, classes)
            dense = head_stats.head_statistics(w, mask, classes)
        assert not np.isnan(np.asarray(dense)).all()
        np.testing.assert_allclose(np.asarray(blocked), np.asarray(dense), rtol=2e-5, atol=2e-6)


D = 5  # the model width of the norm quantities' output projection


@pytest.mark.parametrize("case", ["padding", "decoder window"])
def test_maps_of_selected_heads_and_the_norms_from_the_blocks(case):
    """attention, scores, alpha_fx_norm of two heads, sum_alpha_fx_norm over all heads and
    the norm statistics against float64 numpy: f_h(x_j) = v_h W_O^h formed explicitly."""
    t, h, kv, block, causal, window, local, padded, cap = CASES[case]
    (q, k, v, mask), w, r = run(case, seed=3)
    rng = np.random.default_rng(4)
    w_out = rng.normal(size=(h, K, D)).astype(np.float32)
    scale = (1.0 + rng.random(t)).astype(np.float32)  # Gemma's s'_i: rows divided
    classes = classes_of(t, padded, rng)
    vv = np.repeat(v, h // kv, axis=1)  # [S, H, K] per query head
    f = np.einsum("shk,hkd->shd", vv.astype(np.float64), w_out)  # f_h(x_j)
    fx = np.linalg.norm(f, axis=-1).T  # [H, S]
    heads = (0, h - 1)
    got = captures(
        r.inputs,
        {
            "attention",
            "scores",
            "alpha_fx_norm",
            "sum_alpha_fx_norm",
            "norm_head_stats",
            "decoder_norm_head_stats",
        },
        heads=heads,
        classes=classes,
        fx=norms.fx_norm(vv, w_out),
        gram=norms.head_gram(vv, w_out),
        scale=scale,
    )
    nw = w / scale[None, :, None]
    s = np.einsum("thk,shk->hts", q.astype(np.float64), np.repeat(k, h // kv, 1)) / np.sqrt(K)
    if cap:
        s = np.tanh(s / cap) * cap
    if causal:
        s = np.where(np.tri(t, dtype=bool)[None], s, -np.inf)
    summed = np.linalg.norm(np.einsum("hts,shd->tsd", nw, f), axis=-1)
    tol = dict(rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(np.asarray(got["attention"]), w[list(heads)], **tol)
    np.testing.assert_array_equal(np.isneginf(got["scores"]), np.isneginf(s[list(heads)]))
    np.testing.assert_allclose(np.asarray(got["scores"]), s[list(heads)], **tol)
    alpha_f = (nw * fx[:, None, :])[list(heads)]
    np.testing.assert_allclose(np.asarray(got["alpha_fx_norm"]), alpha_f, **tol)
    np.testing.assert_allclose(np.asarray(got["sum_alpha_fx_norm"]), summed, rtol=1e-4, atol=1e-5)
    weights = head_stats.normalise_rows(jnp.asarray(w * fx[:, None, :], jnp.float32))
    encoder = head_stats.encoder_statistics_from_rows(got["norm_head_stats"], mask, classes)
    decoder = head_stats.decoder_statistics_from_rows(got["decoder_norm_head_stats"], mask)
    want_encoder = head_stats.head_statistics(weights, mask, classes)
    want_decoder = head_stats.decoder_statistics(weights, mask, classes, causal)
    np.testing.assert_allclose(np.asarray(encoder), np.asarray(want_encoder), rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(np.asarray(decoder), np.asarray(want_decoder), rtol=2e-5, atol=2e-6)
