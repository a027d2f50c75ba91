"""attn_res_norm and attn_res_ln_norm against a naive per-token decomposition.

Kobayashi et al. 2021: the output of the attention block with residual is
y_i = sum_j c_ij + b_O with c_ij = sum_h alpha^h_ij f_h(x_j) + delta_ij x_j;
with LN's statistics of y_i fixed, LN(y_i) = sum_j gamma (c_ij - mean c_ij) / s_i
+ gamma (b_O - mean b_O) / s_i + beta. The reference materialises every c_ij
from the torch weights and inputs, and first proves the decomposition is exact
by reconstructing torch's own attention-block output from it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hf_fixtures import EXAMPLE_A, EXAMPLE_B, torch_inputs

WHAT = ("attn_res_norm", "attn_res_ln_norm")


def _naive(model, enc):
    """Per layer: (||c_ij||, ||LN-decomposed c_ij||) [T, S] for example 0, float64."""
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
        c = torch.einsum("hts,hsd->tsd", alpha, f) + torch.eye(s_len)[:, :, None] * x[None]
        y = c.sum(1) + dense.bias.double()
        ln = lay.attention.output.LayerNorm
        std = torch.sqrt(y.var(-1, unbiased=False) + ln.eps)
        gamma, beta = ln.weight.double(), ln.bias.double()
        c_ln = gamma * (c - c.mean(-1, keepdim=True)) / std[:, None, None]
        bias = gamma * (dense.bias.double() - dense.bias.double().mean()) / std[:, None] + beta
        # The decomposition is exact: it rebuilds torch's attention-block output.
        np.testing.assert_allclose(c_ln.sum(1) + bias, block_out[layer], atol=1e-5)
        result.append((c.norm(dim=-1).numpy(), c_ln.norm(dim=-1).numpy()))
    return result


@pytest.mark.parametrize("family", ["bert", "roberta"])
@pytest.mark.parametrize("text", [EXAMPLE_A, (EXAMPLE_A, EXAMPLE_B)])
def test_residual_and_layernorm_norms_match_naive_decomposition(
    engines, torch_models, tokenizers, family, text
):
    cap = engines[family].capture([text], what=WHAT)[0]
    enc = torch_inputs(tokenizers[family], [text], family)
    for layer, (res, res_ln) in enumerate(_naive(torch_models[family], enc)):
        np.testing.assert_allclose(cap.attn_res_norm[layer], res, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(cap.attn_res_ln_norm[layer], res_ln, rtol=1e-5, atol=1e-5)


def test_residual_norm_exceeds_attention_only_on_the_diagonal(engines):
    cap = engines["bert"].capture([EXAMPLE_A], what=("sum_alpha_fx_norm", "attn_res_norm"))[0]
    off = ~np.eye(cap.length, dtype=bool)
    np.testing.assert_allclose(cap.attn_res_norm[:, off], cap.sum_alpha_fx_norm[:, off], rtol=1e-5)
    assert not np.allclose(np.diagonal(cap.attn_res_norm, axis1=1, axis2=2),
                           np.diagonal(cap.sum_alpha_fx_norm, axis1=1, axis2=2))  # fmt: skip
