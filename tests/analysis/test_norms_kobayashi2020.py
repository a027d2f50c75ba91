"""Kobayashi et al. 2020's norms, as their released code computes them, against jaxattn's.

`authors_norms` is written here (float64 torch) from the authors' modified
transformers (gorokoba560/norm-analysis-of-transformer, emnlp2020/transformers/
src/transformers/modeling_bert.py, BertNormOutput): the value layer is the
value Linear's output (x W_V + b_V), split per head; W_O^h is the output
dense weight viewed as (D, H, d) and permuted to (H, d, D); f_h(x) = value_h
W_O^h with no output bias; ||f|| over D; alpha f built as a [B, H, T, S, D]
tensor and its norm taken; ||sum_h alpha f|| from the sum over heads of that
tensor. Their code changed BERT only, so only BERT is checked.

Their analyses use these norms raw: exp1_bert/re-examine.py's [CLS] share is
the mean over rows of the sum over [CLS] keys of ||alpha f||. jaxattn's "norm"
weights divide each head's row by its sum (`jaxattn.analysis.weights`), so they
compare with attention; the last test pins that relation.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hf_fixtures import torch_inputs

from jaxattn.analysis import capture_weights

torch = pytest.importorskip("torch")

NORMS = ("fx_norm", "alpha_fx_norm", "sum_alpha_fx_norm")


def authors_norms(model, enc) -> dict[str, np.ndarray]:
    """{norm: [L, ...]} of one unpadded example, by the module docstring (float64)."""
    values = []
    hooks = [
        layer.attention.self.value.register_forward_hook(lambda _m, _i, o: values.append(o))
        for layer in model.encoder.layer
    ]
    try:
        with torch.no_grad():
            out = model(**enc, output_attentions=True)
    finally:
        for hook in hooks:
            hook.remove()
    heads = model.config.num_attention_heads
    found = {name: [] for name in NORMS}
    for layer, value, alpha in zip(model.encoder.layer, values, out.attentions, strict=True):
        b, t, all_heads = value.shape
        size = all_heads // heads
        v = value.view(b, t, heads, size).permute(0, 2, 1, 3)  # [B, H, S, d]
        w_o = layer.attention.output.dense.weight.detach()
        w_o = w_o.view(w_o.shape[0], heads, size).permute(1, 2, 0)  # [H, d, D]
        f = torch.einsum("bhsk,hkd->bhsd", v, w_o)  # f_h(x_s), no b_O
        weighted = torch.einsum("bhts,bhsd->bhtsd", alpha, f)  # alpha f
        found["fx_norm"].append(f.norm(dim=-1)[0])
        found["alpha_fx_norm"].append(weighted.norm(dim=-1)[0])
        found["sum_alpha_fx_norm"].append(weighted.sum(1).norm(dim=-1)[0])
    return {name: torch.stack(v).numpy() for name, v in found.items()}


@pytest.fixture(scope="module")
def bert64(torch_models):
    return copy.deepcopy(torch_models["bert"]).double()


def test_engine_norms_are_the_authors(bert64, tokenizers, standard_texts, full_captures):
    for text, cap in zip(standard_texts["bert"], full_captures["bert"], strict=True):
        want = authors_norms(bert64, torch_inputs(tokenizers["bert"], [text], "bert"))
        for name in NORMS:
            got = cap.array(name)
            assert got.shape == want[name].shape, (name, text)
            scale = np.abs(want[name]).max()
            np.testing.assert_allclose(
                got, want[name], rtol=1e-5, atol=1e-5 * scale, err_msg=f"{name} of {text!r}"
            )
        # the quantities' own definitions hold too: ||alpha f|| = alpha ||f||
        np.testing.assert_allclose(
            cap.alpha_fx_norm, cap.attention * cap.fx_norm[:, :, None, :], rtol=1e-5, atol=1e-7
        )


def test_norm_weights_are_the_authors_norms_per_row(
    bert64, tokenizers, standard_texts, full_captures
):
    """jaxattn's "norm" kind is the authors' raw ||alpha f|| divided by its row sum
    per head: a share like attention's, where their re-examine.py sums raw norms."""
    text, cap = standard_texts["bert"][2], full_captures["bert"][2]  # the sentence pair
    raw = authors_norms(bert64, torch_inputs(tokenizers["bert"], [text], "bert"))["alpha_fx_norm"]
    shares = capture_weights(cap, "norm")
    np.testing.assert_allclose(shares, raw / raw.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
    cls_raw = raw[..., 0].mean(-1)  # [L, H]: re-examine.py's [CLS] statistic
    cls_share = shares[..., 0].mean(-1)
    assert not np.allclose(cls_raw, cls_share, rtol=1e-2)  # different scales: raw norms
