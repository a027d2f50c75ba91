"""Query rows and key positions of the maps on the blockwise path (issue 31): the maps
are computed for the selected rows and keys only and written straight into their
[H_sel, R, S'] outputs. Against a float64 softmax (rows and keys out of order, a row
twice, odd blocks, padding, causal, windows, GQA, soft cap, Gemma's row scale); the
compiled program's memory grows linearly in T for a fixed number of rows. The dense
path with the same selection: tests/test_blockwise_positions_engine.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_models import config_of, params_of, softmax_reference

from jaxattn.engine import blockwise, head_stats, norms
from jaxattn.engine.model import Encoder
from jaxattn.engine.precision import Matmul
from jaxattn.spec import CaptureSpec
from jaxattn.token_classes import PUNCT_BIT

K, D = 4, 5  # head dim; the model width of the norm quantities' output projection
CASES = {
    # name: (T, heads, kv heads, block, causal, window, local, padded, cap, rows, keys)
    "encoder padding": (37, 3, 3, 10, False, 0, False, 6, None, [36, 3, 17, 3, 0], None),
    "encoder window, keys": (33, 2, 2, 5, False, 9, True, 3, None, None, [32, 0, 15, 16]),
    "causal gqa soft cap": (29, 6, 2, 7, True, 0, False, 4, 0.7, [*range(20, 29)], [28, 0, 24]),
    "decoder window, one row": (31, 4, 2, 6, True, 5, True, 2, None, [14], [*range(31)][::-1]),
}


def inputs(t, h, kv, padded, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(t, h, K)).astype(np.float32) * 2
    k = rng.normal(size=(t, kv, K)).astype(np.float32) * 2
    v = rng.normal(size=(t, kv, K)).astype(np.float32)
    return q, k, v, np.arange(t) < t - padded


@pytest.mark.parametrize("case", CASES)
def test_selected_maps_equal_the_float64_softmax_at_those_rows_and_keys(case):
    """attention, scores, alpha_fx_norm of two heads and sum_alpha_fx_norm at rows and
    keys in any order (a row twice), with f_h(x_j) = v_h W_O^h formed explicitly; the
    statistics asked beside them still take every row."""
    t, h, kv, block, causal, window, local, padded, cap, rows, keys = CASES[case]
    q, k, v, mask = inputs(t, h, kv, padded)
    scale = 1 / np.sqrt(K)

    def logits(x):
        x = x * scale
        return jnp.tanh(x / cap) * cap if cap else x

    kw = dict(mm=Matmul(), logits=logits, causal=causal, window=window, local=local)
    r = blockwise.attention(q, k, v, mask, **kw, block=block)
    rng = np.random.default_rng(4)
    w_out = rng.normal(size=(h, K, D)).astype(np.float32)
    s_row = (1.0 + rng.random(t)).astype(np.float32)  # Gemma's s'_i: rows divided
    vv = np.repeat(v, h // kv, axis=1)  # [S, H, K] per query head
    heads = (0, h - 1)
    positions = {
        field: jnp.asarray(p)
        for field, p in (("query_positions", rows), ("key_positions", keys))
        if p is not None
    }
    what = {"attention", "scores", "alpha_fx_norm", "sum_alpha_fx_norm", "decoder_head_stats"}
    classes = np.where(rng.random(t) < 0.3, PUNCT_BIT, 0).astype(np.int8)
    extra = dict(fx=norms.fx_norm(vv, w_out), gram=norms.head_gram(vv, w_out), scale=s_row)
    extra["classes"] = classes
    got = jax.jit(
        lambda inputs, positions, extra: blockwise.captures(
            inputs, what, heads=heads, positions=positions, **extra
        )
    )(r.inputs, positions, extra)

    _, _, w = softmax_reference(q, k, v, mask, causal, window, local, scale, cap)  # [H, T, S]
    f = np.einsum("shk,hkd->shd", vv.astype(np.float64), w_out)  # f_h(x_j)
    fx = np.linalg.norm(f, axis=-1).T  # [H, S]
    nw = w / s_row[None, :, None]
    s = np.einsum("thk,shk->hts", q.astype(np.float64), np.repeat(k, h // kv, 1)) * scale
    if cap:
        s = np.tanh(s / cap) * cap
    if causal:
        s = np.where(np.tri(t, dtype=bool)[None], s, -np.inf)
    want = {
        "attention": w[list(heads)],
        "scores": s[list(heads)],
        "alpha_fx_norm": (nw * fx[:, None, :])[list(heads)],
        "sum_alpha_fx_norm": np.linalg.norm(np.einsum("hts,shd->tsd", nw, f), axis=-1),
    }
    every = list(range(t))
    for name, full in want.items():
        x = np.take(np.take(full, rows or every, axis=-2), keys or every, axis=-1)
        assert got[name].shape == x.shape, name
        np.testing.assert_array_equal(np.isneginf(got[name]), np.isneginf(x), err_msg=name)
        np.testing.assert_allclose(got[name], x, rtol=1e-4, atol=1e-5, err_msg=name)
    stats = head_stats.decoder_statistics_from_rows(got["decoder_head_stats"], mask)
    dense = head_stats.decoder_statistics(jnp.asarray(w, jnp.float32), mask, classes, causal)
    np.testing.assert_allclose(stats, dense, rtol=2e-5, atol=2e-6)


def program_bytes(config, params, what, length, positions):
    """The compiled blockwise program's temp + output bytes of one example of `length`
    tokens capturing `what` of head 2 of layer 1 at the maps' `positions` ({field: [n]
    int32}, data as the step passes them)."""
    spec = CaptureSpec(what=what, layers=(1,), heads=(2,))
    model = Encoder(config, attention="blockwise", block=128)
    ids = jnp.zeros(length, jnp.int32)

    def f(params, ids, mask, classes, positions):
        return model.apply({"params": params}, ids, ids, mask, spec, None, classes, positions)

    args = (params, ids, ids > -1, jnp.zeros(length, jnp.int8), positions)
    memory = jax.jit(f).lower(*args).compile().memory_analysis()
    return memory.temp_size_in_bytes + memory.output_size_in_bytes


def test_selected_rows_keep_the_blockwise_memory_linear():
    """The last 32 rows of one head's map of a decoder layer (every key): doubling T at
    most doubles temp + output bytes, where one [T, T] float32 map would quadruple (4
    and 16 MiB at 1,024 and 2,048 tokens)."""
    config = config_of("llama")
    params = params_of(config)
    got = []
    for t in (1024, 2048):
        rows = {"query_positions": jnp.arange(t - 32, t, dtype=jnp.int32)}
        got.append(program_bytes(config, params, ("attention",), t, rows))
    assert got[1] <= 2 * got[0] + (1 << 20), got  # linear, plus a constant
    assert got[1] < 2048 * 2048 * 4 // 4, got  # far less than one [T, T] float32 map
