"""attn_res_norm, attn_res_ln_norm and the mixing ratios against a naive decomposition.

Kobayashi et al. 2021: the output of the attention block with residual is
y_i = sum_j c_ij + b_O with c_ij = sum_h alpha^h_ij f_h(x_j) + delta_ij x_j;
with LN's statistics of y_i fixed, LN(y_i) = sum_j gamma (c_ij - mean c_ij) / s_i
+ gamma (b_O - mean b_O) / s_i + beta. The reference materialises every c_ij
from the torch weights and inputs, and first proves the decomposition is exact
by reconstructing torch's own attention-block output from it. From the same
vectors the authors' mixing ratio (kobayashi_reference) checks `mixing_ratio`,
`mixing_norm`, `preserving_norm` and `MixingRatios`.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hf_fixtures import EXAMPLE_A, EXAMPLE_B, torch_inputs
from kobayashi_reference import authors_mixing

from jaxattn.analysis import MixingRatios
from jaxattn.quantities import MIXING, NORM_MEASURES

WHAT = ("attention", "attn_res_norm", "attn_res_ln_norm", *MIXING)


def _naive(model, enc):
    """Per layer: (||c_ij||, ||LN-decomposed c_ij||) [T, S] and the authors' mixing
    {name: [T, M]} for example 0, float64."""
    layers = model.encoder.layer
    block_out = []
    hooks = [
        lay.attention.output.register_forward_hook(
            lambda _m, _i, out: block_out.append(out.detach().double()[0])
        )
        for lay in layers
    ]
    try:
        with torch.no_grad():
            out = model(**enc, output_attentions=True, output_hidden_states=True)
            return _decompose(model, out, block_out)
    finally:
        for h in hooks:
            h.remove()


def _decompose(model, out, block_out):
    layers = model.encoder.layer
    result = []
    for layer, lay in enumerate(layers):
        x = out.hidden_states[layer][0].double()  # [S, D] the layer input
        alpha = out.attentions[layer][0].double()  # [H, T, S]
        heads, _, s_len = alpha.shape
        v = lay.attention.self.value(x.float()).double().view(s_len, heads, -1)  # [S, H, K]
        dense = lay.attention.output.dense
        w_o = dense.weight.double().T.reshape(heads, -1, x.shape[1])  # [H, K, D]
        f = torch.einsum("shk,hkd->hsd", v, w_o)  # f_h(x_j), materialised
        attn = torch.einsum("hts,hsd->tsd", alpha, f)
        c = attn + torch.eye(s_len)[:, :, None] * x[None]
        y = c.sum(1) + dense.bias.double()
        ln = lay.attention.output.LayerNorm
        std = torch.sqrt(y.var(-1, unbiased=False) + ln.eps)
        gamma, beta = ln.weight.double(), ln.bias.double()
        c_ln = gamma * (c - c.mean(-1, keepdim=True)) / std[:, None, None]
        bias = gamma * (dense.bias.double() - dense.bias.double().mean()) / std[:, None] + beta
        # The decomposition is exact: it rebuilds torch's attention-block output.
        np.testing.assert_allclose(c_ln.sum(1) + bias, block_out[layer], atol=1e-5)
        mixing = authors_mixing([v.numpy() for v in (attn, c, c_ln)])
        result.append((c.norm(dim=-1).numpy(), c_ln.norm(dim=-1).numpy(), mixing))
    return result


@pytest.mark.parametrize("family", ["bert", "roberta"])
@pytest.mark.parametrize("text", [EXAMPLE_A, (EXAMPLE_A, EXAMPLE_B)])
def test_residual_and_layernorm_norms_match_naive_decomposition(
    engines, torch_models, tokenizers, family, text
):
    cap = engines[family].capture([text], what=WHAT)[0]
    enc = torch_inputs(tokenizers[family], [text], family)
    ratios = []
    for layer, (res, res_ln, mixing) in enumerate(_naive(torch_models[family], enc)):
        np.testing.assert_allclose(cap.attn_res_norm[layer], res, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(cap.attn_res_ln_norm[layer], res_ln, rtol=1e-5, atol=1e-5)
        for name, want in mixing.items():
            np.testing.assert_allclose(cap.array(name)[layer], want, rtol=1e-5, atol=1e-5)
        ratios.append(mixing["mixing_ratio"])
    # MixingRatios' per-layer means are the reference's token means.
    mix = MixingRatios()
    mix.update(cap)
    for k, measure in enumerate(NORM_MEASURES):
        want = [r[:, k].mean() for r in ratios]
        np.testing.assert_allclose(mix.result()[measure], want, rtol=1e-5, atol=1e-6)


def test_residual_norm_exceeds_attention_only_on_the_diagonal(engines):
    cap = engines["bert"].capture([EXAMPLE_A], what=("sum_alpha_fx_norm", "attn_res_norm"))[0]
    off = ~np.eye(cap.length, dtype=bool)
    np.testing.assert_allclose(cap.attn_res_norm[:, off], cap.sum_alpha_fx_norm[:, off], rtol=1e-5)
    assert not np.allclose(
        np.diagonal(cap.attn_res_norm, axis1=1, axis2=2),
        np.diagonal(cap.sum_alpha_fx_norm, axis1=1, axis2=2),
    )


def test_three_tokens_by_hand_where_norms_of_sums_and_sums_of_norms_differ():
    """One head, D = K = 2, W_O = I, gamma = 1, s = 1; row 0 by hand.

    v = (1, 0), (0, 1), (-1, 0); alpha_0 = (0.5, 0.25, 0.25); x_0 = (0, 2).
    Attn-N: mixing 0.25 (0, 1) + 0.25 (-1, 0) = (-0.25, 0.25), ||.|| = sqrt(2)/4;
      own 0.5 (1, 0), ||.|| = 0.5: r = 1 / (1 + sqrt(2)) = sqrt(2) - 1. The ratio of
      summed per-pair norms would be (0.25 + 0.25) / 1 = 0.5.
    AttnRes-N: own (0.5, 2), ||.|| = sqrt(4.25): r = (sqrt(2)/4) / (sqrt(2)/4 + sqrt(4.25)).
    AttnResLn-N: centred mixing (-0.25, 0.25); centred own (-0.75, 0.75): r = 1/4.
    """
    import jax.numpy as jnp

    from jaxattn.analysis import mixing_ratio_rows
    from jaxattn.engine import norms

    values = jnp.array([[[1.0, 0.0]], [[0.0, 1.0]], [[-1.0, 0.0]]])  # [S, H, K]
    alpha = jnp.array([[[0.5, 0.25, 0.25], [0.2, 0.6, 0.2], [0.0, 0.5, 0.5]]])  # [H, T, S]
    w_out = jnp.eye(2)[None]  # [H, K, D]
    x = jnp.array([[0.0, 2.0], [1.0, 1.0], [3.0, -1.0]])
    out = norms.mixing(alpha, values, w_out, x, jnp.ones(2), jnp.ones(3))
    mix0 = np.sqrt(2) / 4
    np.testing.assert_allclose(out["mixing_norm"][0], [mix0, mix0, mix0], rtol=1e-6)
    np.testing.assert_allclose(
        out["preserving_norm"][0], [0.5, np.sqrt(4.25), 0.75 * np.sqrt(2)], rtol=1e-6
    )
    want = [np.sqrt(2) - 1, mix0 / (mix0 + np.sqrt(4.25)), 0.25]
    np.testing.assert_allclose(out["mixing_ratio"][0], want, rtol=1e-6)
    # The ratio of summed per-pair norms (jaxattn 0.2's) is another number.
    pair_norms = np.asarray(norms.sum_alpha_fx_norm(alpha, values, w_out))
    assert mixing_ratio_rows(pair_norms)[0] == pytest.approx(0.5)
    # Every row against the authors' formula on the materialised vectors.
    f = np.asarray(values[:, 0])  # f(x_j) = v_j with W_O = I
    attn = np.asarray(alpha[0])[:, :, None] * f[None]  # [T, S, D]
    res = attn + np.eye(3)[:, :, None] * np.asarray(x)[None]
    ln = res - res.mean(-1, keepdims=True)
    for name, ref in authors_mixing([attn, res, ln]).items():
        np.testing.assert_allclose(out[name], ref, rtol=1e-6, atol=1e-7)
