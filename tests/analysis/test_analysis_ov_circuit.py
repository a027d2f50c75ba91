"""The OV-circuit copying score: hand-made heads with known eigenvalues, the [K, K] shortcut
against the [V, V] matrix formed in numpy, and the tiny GPT-2 / Llama read from torch's
own weights (the full circuit formed from the state dict, eigenvalues of V x V)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import jaxattn
from jaxattn.analysis.ov_circuit import (
    copying_score,
    model_copying_scores,
    ov_eigenvalues,
    unembed_embed,
)
from jaxattn.engine.causal_lm import unembedding

sys.path.insert(0, str(Path(__file__).parents[1] / "families"))
from gpt2_fixture import make_gpt2_checkpoint  # noqa: E402
from llama_fixture import make_llama_checkpoint  # noqa: E402


def _score_of_head(w_v, w_o, d=4):
    """The copying score of a head on W_E = W_U = I_D (so M = W_V W_O)."""
    eye = np.eye(d)
    return float(copying_score(ov_eigenvalues(unembed_embed(eye, eye), w_v, w_o)))


@pytest.mark.parametrize(
    ("w_o", "want"),
    [
        (np.eye(2), 1.0),  # M projects onto two tokens: eigenvalues 1, 1
        (-np.eye(2), -1.0),  # anti-copying
        (np.array([[0.0, -1.0], [1.0, 0.0]]), 0.0),  # a 90-degree rotation: +i, -i
        (np.diag([2.0, -1.0]), 1.0 / 3.0),  # (2 - 1) / (2 + 1)
        (np.array([[1.0, -1.0], [1.0, 1.0]]), 1 / np.sqrt(2)),  # 1 +- i: 2 / (2 sqrt 2)
    ],
)
def test_hand_made_heads(w_o, want):
    w_v = np.eye(4)[:, :2]  # reads tokens 0 and 1 (W_E = I)
    got = _score_of_head(w_v, w_o @ w_v.T)
    assert got == pytest.approx(want, abs=1e-12)


def test_all_zero_is_nan():
    assert np.isnan(copying_score(np.zeros(3)))


def test_the_k_by_k_shortcut_equals_the_v_by_v_eigenvalues():
    rng = np.random.default_rng(0)
    v, d, k = 23, 7, 3
    w_e, w_u = rng.normal(size=(v, d)), rng.normal(size=(v, d))
    w_v, w_o = rng.normal(size=(d, k)), rng.normal(size=(k, d))
    full = np.linalg.eigvals(w_e @ w_v @ w_o @ w_u.T)
    want = full.sum().real / np.abs(full).sum()
    got = copying_score(ov_eigenvalues(unembed_embed(w_u, w_e), w_v, w_o))
    assert got == pytest.approx(want, abs=1e-9)
    assert np.abs(full).sum() > 1e-3


def _t(x):
    return x.detach().double().numpy()


def _full_scores_gpt2(model, cfg):
    """[L, H] scores from GPT2LMHeadModel's state, the V x V circuit formed."""
    d, h = cfg.n_embd, cfg.n_head
    k = d // h
    centre = np.eye(d) - 1.0 / d
    w_e = _t(model.transformer.wte.weight)
    r_u = centre @ np.diag(_t(model.transformer.ln_f.weight)) @ _t(model.lm_head.weight).T
    out = np.zeros((cfg.n_layer, h))
    for layer, block in enumerate(model.transformer.h):
        r_v = centre @ np.diag(_t(block.ln_1.weight)) @ _t(block.attn.c_attn.weight)[:, 2 * d :]
        w_o = _t(block.attn.c_proj.weight)  # Conv1D [in = H K, out = D]
        for head in range(h):
            s = slice(head * k, (head + 1) * k)
            lam = np.linalg.eigvals(w_e @ r_v[:, s] @ w_o[s] @ r_u)
            out[layer, head] = lam.sum().real / np.abs(lam).sum()
    return out


def _full_scores_llama(model, cfg):
    """[L, H] scores from LlamaForCausalLM's state (RMSNorm: no centring; grouped values)."""
    h, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    k = cfg.hidden_size // h
    w_e = _t(model.model.embed_tokens.weight)
    r_u = np.diag(_t(model.model.norm.weight)) @ _t(model.lm_head.weight).T
    out = np.zeros((cfg.num_hidden_layers, h))
    for layer, block in enumerate(model.model.layers):
        att = block.self_attn
        r_v = np.diag(_t(block.input_layernorm.weight)) @ _t(att.v_proj.weight).T  # [D, H_kv K]
        w_o = _t(att.o_proj.weight).T  # [H K, D]
        for head in range(h):
            g = head // (h // kv)
            lam = np.linalg.eigvals(
                w_e @ r_v[:, g * k : (g + 1) * k] @ w_o[head * k : (head + 1) * k] @ r_u
            )
            out[layer, head] = lam.sum().real / np.abs(lam).sum()
    return out


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_the_tiny_decoders_against_their_torch_weights(family, tmp_path):
    from transformers import AutoModelForCausalLM

    make = make_gpt2_checkpoint if family == "gpt2" else make_llama_checkpoint
    path = make(tmp_path / family)
    engine = jaxattn.load(path, buckets=(16,))
    got = model_copying_scores(engine.config, engine.step.canonical_params(), unembedding(engine))
    model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True)
    want = (_full_scores_gpt2 if family == "gpt2" else _full_scores_llama)(model, model.config)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-7)
    assert np.ptp(got) > 0.05  # the heads differ: the test would see a mix-up


def test_a_post_norm_model_is_refused():
    from jaxattn.config import tiny

    with pytest.raises(ValueError, match="pre-norm decoder"):
        model_copying_scores(tiny(), {}, np.zeros((101, 15)))
