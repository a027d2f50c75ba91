"""The OV-circuit copying score: hand-made heads with known eigenvalues, the [K, K] shortcut
against the [V, V] matrix formed in numpy, and the tiny GPT-2 / Llama / Gemma 3 read from
torch's own weights (the full circuit formed from the state dict, eigenvalues of V x V, the
logits centred over the vocabulary as TransformerLens's center_unembed)."""

from __future__ import annotations

import numpy as np
import pytest
from gemma_fixture import make_gemma_checkpoint  # noqa: E402
from gpt2_fixture import make_gpt2_checkpoint  # noqa: E402
from llama_fixture import make_llama_checkpoint  # noqa: E402

import jaxattn
from jaxattn.analysis.ov_circuit import (
    copying_score,
    model_copying_scores,
    ov_eigenvalues,
    unembed_embed,
)
from jaxattn.engine.causal_lm import unembedding
from jaxattn.errors import UsageError


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


def test_centring_the_logits_equals_the_circuit_formed_with_c(monkeypatch):
    """W_U^T C W_E from the chunked sums equals the [V, V] circuit times C = I - 11^T / V
    formed in numpy; a head that only adds to every logit alike is then nothing."""
    import jaxattn.analysis.ov_circuit as ov

    monkeypatch.setattr(ov, "CHUNK", 5)  # several chunks, the last one short
    rng = np.random.default_rng(1)
    v, d, k = 23, 7, 3
    w_e, w_u = rng.normal(size=(v, d)), rng.normal(size=(v, d))
    w_u[:, 0] += 4.0  # a large shared logit direction, which centring removes
    w_v, w_o = rng.normal(size=(d, k)), rng.normal(size=(k, d))
    c = np.eye(v) - np.ones((v, v)) / v
    full = np.linalg.eigvals(w_e @ w_v @ w_o @ w_u.T @ c)
    got = copying_score(ov_eigenvalues(ov.unembed_embed(w_u, w_e, center=True), w_v, w_o))
    assert got == pytest.approx(full.sum().real / np.abs(full).sum(), abs=1e-9)
    raw = copying_score(ov_eigenvalues(ov.unembed_embed(w_u, w_e), w_v, w_o))
    assert abs(raw - got) > 1e-3  # the centring matters here
    # W_O writing only the direction every token's logit reads alike (w_u's column 0
    # after the shift dominates): centred, that part of the map is gone
    ones = np.zeros((v, d))
    ones[:, 0] = 1.0  # every token reads dimension 0 with the same weight
    assert np.allclose(ov.unembed_embed(ones, w_e, center=True), 0.0)


def _t(x):
    return x.detach().double().numpy()


def _vocab_centring(v):
    """C = I_V - 11^T / V: TransformerLens's center_unembed (W_U minus its mean over tokens)."""
    return np.eye(v) - 1.0 / v


def _ratio(lam):
    return lam.sum().real / np.abs(lam).sum()


def _full_scores_gpt2(model, cfg):
    """[L, H] scores from GPT2LMHeadModel's state, the V x V circuit formed."""
    d, h = cfg.n_embd, cfg.n_head
    k = d // h
    centre = np.eye(d) - 1.0 / d
    w_e = _t(model.transformer.wte.weight)
    r_u = centre @ np.diag(_t(model.transformer.ln_f.weight)) @ _t(model.lm_head.weight).T
    r_u = r_u @ _vocab_centring(r_u.shape[1])
    out = np.zeros((cfg.n_layer, h))
    for layer, block in enumerate(model.transformer.h):
        r_v = centre @ np.diag(_t(block.ln_1.weight)) @ _t(block.attn.c_attn.weight)[:, 2 * d :]
        w_o = _t(block.attn.c_proj.weight)  # Conv1D [in = H K, out = D]
        for head in range(h):
            s = slice(head * k, (head + 1) * k)
            out[layer, head] = _ratio(np.linalg.eigvals(w_e @ r_v[:, s] @ w_o[s] @ r_u))
    return out


def _full_scores_llama(model, cfg, offset=0.0, center=True):
    """[L, H] scores from LlamaForCausalLM's state (RMSNorm: no centring; grouped values);
    offset 1: Gemma's (1 + w) norms, with its post-attention norm's scale after W_O;
    center False: the logits as they are (a soft-capped head, Gemma 2)."""
    h, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    k = getattr(cfg, "head_dim", None) or cfg.hidden_size // h
    w_e = _t(model.model.embed_tokens.weight)
    r_u = np.diag(offset + _t(model.model.norm.weight)) @ _t(model.lm_head.weight).T
    if center:
        r_u = r_u @ _vocab_centring(r_u.shape[1])
    out = np.zeros((cfg.num_hidden_layers, h))
    for layer, block in enumerate(model.model.layers):
        att = block.self_attn
        gamma = offset + _t(block.input_layernorm.weight)
        r_v = np.diag(gamma) @ _t(att.v_proj.weight).T  # [D, H_kv K]
        w_o = _t(att.o_proj.weight).T  # [H K, D]
        if offset:  # Gemma: h = x + post_attention_layernorm(attn)
            w_o = w_o @ np.diag(offset + _t(block.post_attention_layernorm.weight))
        for head in range(h):
            g = head // (h // kv)
            lam = np.linalg.eigvals(
                w_e @ r_v[:, g * k : (g + 1) * k] @ w_o[head * k : (head + 1) * k] @ r_u
            )
            out[layer, head] = _ratio(lam)
    return out


FAMILIES = {
    "gpt2": (make_gpt2_checkpoint, _full_scores_gpt2),
    "llama": (make_llama_checkpoint, _full_scores_llama),
    "gemma3": (
        lambda path: make_gemma_checkpoint("gemma3", path),
        lambda model, cfg: _full_scores_llama(model, cfg, offset=1.0),
    ),
    # soft-capped logits are not shift-invariant: not centred (nor by TransformerLens)
    "gemma2": (
        lambda path: make_gemma_checkpoint("gemma2", path, final_logit_softcapping=2.0),
        lambda model, cfg: _full_scores_llama(model, cfg, offset=1.0, center=False),
    ),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_tiny_decoders_against_their_torch_weights(family, tmp_path):
    from transformers import AutoModelForCausalLM

    make, reference = FAMILIES[family]
    path = make(tmp_path / family)
    engine = jaxattn.load(path, buckets=(16,))
    got = model_copying_scores(engine.config, engine.step.canonical_params(), unembedding(engine))
    model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True)
    want = reference(model, model.config)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-7)
    assert np.ptp(got) > 0.05  # the heads differ: the test would see a mix-up


def test_a_post_norm_model_is_refused():
    from jaxattn.config import tiny

    with pytest.raises(UsageError, match="pre-norm decoder"):
        model_copying_scores(tiny(), {}, np.zeros((101, 15)))
