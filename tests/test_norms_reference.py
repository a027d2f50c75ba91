"""Kobayashi et al. (2020) norms against a NAIVE reference that materialises f.

For each layer l and head h, f_h(x_j) = (x_j W_V^h + b_V^h) W_O^h (output bias
left out, as `jaxattn.quantities` defines fx_norm) is built explicitly as a [S, H, D] array from
the torch weights and the torch layer input x = hidden_states[l]; the norms
are then taken directly, with alpha from torch's eager attentions:

  fx_norm[h, j]              = ||f_h(x_j)||
  alpha_fx_norm[h, i, j]     = ||alpha^h_ij f_h(x_j)||           ([H, T, S, D] built)
  sum_alpha_fx_norm[i, j]    = ||sum_h alpha^h_ij f_h(x_j)||      (all heads)

The reference itself is checked first: sum_j sum_h alpha f + b_O must equal
the torch attention output projection's output (from a forward hook).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hf_fixtures import EXAMPLE_A, EXAMPLE_B, attention_modules, torch_inputs, torch_reference

NORMS = ("fx_norm", "alpha_fx_norm", "sum_alpha_fx_norm")


def _weights(model, family: str, layer: int):
    """(W_V [D, H*K], b_V [H*K], W_O [H*K, D], b_O [D]) as float64, x @ W convention."""
    _, _, v, o = attention_modules(model, family)[layer]
    w = [t.detach().double().numpy() for t in (v.weight, v.bias, o.weight, o.bias)]
    return w[0].T, w[1], w[2].T, w[3]


def naive_norms(model, family: str, ref: dict, num_heads: int) -> dict:
    """fx_norm [L,H,T], alpha_fx_norm [L,H,T,T], sum_alpha_fx_norm [L,T,T], and f itself."""
    out = {name: [] for name in (*NORMS, "f", "attn_out")}
    for layer in range(ref["attention"].shape[0]):
        x = ref["hidden_states"][layer]  # [T, D]: the layer's input
        alpha = ref["attention"][layer]  # [H, T, S]
        w_v, b_v, w_o, b_o = _weights(model, family, layer)
        t, d = x.shape
        k = d // num_heads
        v = (x @ w_v + b_v).reshape(t, num_heads, k)  # [S, H, K]
        f = np.stack(
            [v[:, h, :] @ w_o[h * k : (h + 1) * k, :] for h in range(num_heads)], axis=1
        )  # [S, H, D]
        weighted = alpha[:, :, :, None] * f.transpose(1, 0, 2)[:, None, :, :]  # [H, T, S, D]
        out["f"].append(f)
        out["fx_norm"].append(np.linalg.norm(f, axis=-1).T)
        out["alpha_fx_norm"].append(np.linalg.norm(weighted, axis=-1))
        out["sum_alpha_fx_norm"].append(np.linalg.norm(weighted.sum(0), axis=-1))
        out["attn_out"].append(weighted.sum((0, 2)) + b_o)  # [T, D]
    return {name: np.stack(v) for name, v in out.items()}


def _heads(model, family: str) -> int:
    return model.config.n_heads if family == "distilbert" else model.config.num_attention_heads


def _assert_close(got, want, what):
    # ~1e-5 relative to the tensor's scale (tiny alpha entries have no meaningful
    # relative error, so the absolute part is scaled by the tensor's max).
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max(), err_msg=what)


def test_naive_reference_rebuilds_attention_output(torch_models, tokenizers, family):
    """Sanity of the reference: sum over heads and keys of alpha f, plus b_O, is the
    torch attention output projection's output."""
    model = torch_models[family]
    seen = []
    out_lin = [m[3] for m in attention_modules(model, family)]
    hooks = [m.register_forward_hook(lambda _m, _i, o: seen.append(o.detach())) for m in out_lin]
    try:
        enc = torch_inputs(tokenizers[family], [(EXAMPLE_A, EXAMPLE_B)], family)
        ref = {k: v[0] for k, v in torch_reference(model, family, enc).items()}
    finally:
        for h in hooks:
            h.remove()
    naive = naive_norms(model, family, ref, _heads(model, family))
    want = torch.stack(seen[-len(out_lin) :]).double().numpy()[:, 0]  # [L, T, D]
    np.testing.assert_allclose(naive["attn_out"], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", NORMS)
def test_norms_against_naive(full_captures, references, standard_texts, torch_models, family, name):
    model = torch_models[family]
    for text, cap, ref in zip(
        standard_texts[family], full_captures[family], references[family], strict=True
    ):
        naive = naive_norms(model, family, ref, _heads(model, family))
        got = getattr(cap, name)
        assert got.dtype == np.float32
        assert got.shape == naive[name].shape, (name, text)
        _assert_close(got, naive[name], f"{name} of {text!r}")


def test_norms_nonnegative_and_triangle(full_captures, family):
    """0 <= ||sum_h alpha f|| <= sum_h ||alpha f||; padded keys never leak (T x T)."""
    for cap in full_captures[family]:
        assert (cap.fx_norm >= 0).all() and (cap.alpha_fx_norm >= 0).all()
        assert (cap.sum_alpha_fx_norm >= 0).all()
        bound = cap.alpha_fx_norm.sum(1)  # [L, T, S]
        assert (cap.sum_alpha_fx_norm <= bound * (1 + 1e-5) + 1e-6).all()


def test_head_and_layer_selection_keeps_the_all_heads_sum(
    engines, references, torch_models, standard_texts
):
    """sum_alpha_fx_norm sums over ALL heads of a layer whatever `heads` selects."""
    family = "distilbert"  # 5 heads: a subset is clearly not the whole
    model, engine = torch_models[family], engines[family]
    text, ref = standard_texts[family][2], references[family][2]
    (cap,) = engine.capture([text], what=NORMS, layers=[2, 0], heads=[3, 1])
    assert cap.layers == (0, 2) and cap.heads == (1, 3)
    naive = naive_norms(model, family, ref, _heads(model, family))
    layers, heads = [0, 2], [1, 3]
    assert cap.fx_norm.shape == (2, 2, cap.length)
    _assert_close(cap.fx_norm, naive["fx_norm"][layers][:, heads], "fx_norm")
    _assert_close(cap.alpha_fx_norm, naive["alpha_fx_norm"][layers][:, heads], "alpha_fx_norm")
    _assert_close(cap.sum_alpha_fx_norm, naive["sum_alpha_fx_norm"][layers], "sum_alpha_fx_norm")
    # The two-head partial sum is a different quantity: make sure the test can tell.
    partial = np.linalg.norm(
        (
            ref["attention"][:, heads, :, :, None]
            * naive["f"].transpose(0, 2, 1, 3)[:, heads, None]
        ).sum(1),
        axis=-1,
    )[layers]
    assert np.abs(partial - naive["sum_alpha_fx_norm"][layers]).max() > 1e-3
