"""ModernBERT's rotary parts (jaxattn.engine.rotary) against HF's own torch code.

References: transformers' ModernBertRotaryEmbedding (inverse frequencies,
cos/sin), apply_rotary_pos_emb, masking_utils'
create_bidirectional_sliding_window_mask (the eager local-window mask),
ModernBertConfig's layer_types, and one ModernBertAttention layer (its
eager attention weights) for the parts put together.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import ModernBertConfig
from transformers.masking_utils import create_bidirectional_sliding_window_mask
from transformers.models.modernbert import modeling_modernbert as hf

from jaxattn.engine import rotary
from jaxattn.errors import CheckpointError

D, H, K, T = 18, 3, 6, 40


def _config(**overrides) -> ModernBertConfig:
    fields = dict(
        vocab_size=50,
        hidden_size=D,
        num_attention_heads=H,
        intermediate_size=23,
        num_hidden_layers=4,
        global_attn_every_n_layers=3,
        local_attention=8,
        global_rope_theta=1000.0,
        local_rope_theta=30.0,
    )
    config = ModernBertConfig(**{**fields, **overrides})
    config._attn_implementation = "eager"
    return config


def _ulps(a: np.ndarray, b: np.ndarray) -> int:
    return int(
        np.abs(a.astype(np.float32).view(np.int32) - b.astype(np.float32).view(np.int32)).max()
    )


@pytest.mark.parametrize("head_dim", [6, 10, 14, 64])
@pytest.mark.parametrize("theta", [30.0, 1000.0, 10000.0, 160000.0])
def test_inverse_frequencies_equal_hf_within_one_ulp(head_dim, theta):
    """HF's inv_freq takes torch's float32 power (SLEEF: within 1 ulp, not always the
    correctly rounded value that jaxattn's float64 power rounds to)."""
    config = _config(hidden_size=head_dim * H, global_rope_theta=theta)
    ref = hf.ModernBertRotaryEmbedding(config).full_attention_inv_freq.numpy()
    assert _ulps(rotary.inverse_frequencies(head_dim, theta), ref) <= 1


def test_inverse_frequencies_within_two_ulps_for_every_width():
    """torch's vectorised powf (SLEEF, 1 ulp) may differ from the C library's (e.g. K=48)."""
    for head_dim in range(2, 130, 2):
        for theta in (10.0, 160000.0):
            ref = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
            assert _ulps(rotary.inverse_frequencies(head_dim, theta), ref.numpy()) <= 2


@pytest.mark.parametrize("head_dim, length", [(6, T), (10, T), (6, 1), (64, 300)])
@pytest.mark.parametrize("layer_type", ["full_attention", "sliding_attention"])
def test_rope_angles_match_hf(head_dim, length, layer_type):
    config = _config(hidden_size=head_dim * H)
    theta = config.rope_parameters[layer_type]["rope_theta"]
    emb = hf.ModernBertRotaryEmbedding(config)
    x = torch.zeros(1, length, head_dim * H)
    cos_ref, sin_ref = emb(x, torch.arange(length)[None], layer_type)
    cos, sin = rotary.rope_angles(length, head_dim, theta)
    assert cos.shape == sin.shape == (length, head_dim) and cos.dtype == np.float32
    np.testing.assert_allclose(cos, cos_ref[0].numpy(), rtol=0, atol=1e-7)
    np.testing.assert_allclose(sin, sin_ref[0].numpy(), rtol=0, atol=1e-7)


@pytest.mark.parametrize("head_dim", [6, 10])
def test_apply_rotary_matches_hf(head_dim):
    g = torch.Generator().manual_seed(head_dim)
    q = torch.randn(1, H, T, head_dim, generator=g)  # HF layout [B, H, T, K]
    k = torch.randn(1, H, T, head_dim, generator=g)
    cos, sin = rotary.rope_angles(T, head_dim, 30.0)
    q_ref, k_ref = hf.apply_rotary_pos_emb(
        q, k, torch.tensor(cos)[None], torch.tensor(sin)[None], unsqueeze_dim=1
    )
    for x, ref in ((q, q_ref), (k, k_ref)):
        ours = np.asarray(rotary.apply_rotary(x[0].permute(1, 0, 2).numpy(), cos, sin))  # [T,H,K]
        np.testing.assert_allclose(ours, ref[0].permute(1, 0, 2).numpy(), rtol=0, atol=1e-6)
    assert not np.allclose(ours[1:], k[0].permute(1, 0, 2).numpy()[1:], atol=1e-2)  # it rotates


@pytest.mark.parametrize("length", [1, 3, 4, 5, 9, 40])
@pytest.mark.parametrize("local_attention", [8, 9, 2, 0, 128])
def test_window_mask_matches_hf_eager_mask(length, local_attention):
    config = _config(local_attention=local_attention)
    ref = create_bidirectional_sliding_window_mask(
        config=config, inputs_embeds=torch.zeros(1, length, D), attention_mask=None
    )
    # None: HF skipped the mask (no padding, every pair within the window).
    ref_allowed = np.ones((length, length), bool) if ref is None else (ref[0, 0] == 0).numpy()
    ours = rotary.window_mask(length, local_attention)
    assert ours.shape == (length, length) and ours.dtype == bool
    np.testing.assert_array_equal(ours, ref_allowed)


def test_window_mask_is_half_window_each_side():
    allowed = rotary.window_mask(T, 8)
    assert allowed[20, 16] and allowed[20, 24] and not allowed[20, 15] and not allowed[20, 25]
    assert allowed.sum(1).max() == 9 and (allowed == allowed.T).all()


@pytest.mark.parametrize("every", [1, 2, 3, 5, 7])
def test_is_global_layer_matches_hf_layer_types(every):
    layers = 6
    types = _config(num_hidden_layers=layers, global_attn_every_n_layers=every).layer_types
    ours = [
        "full_attention" if rotary.is_global_layer(i, every) else "sliding_attention"
        for i in range(layers)
    ]
    assert ours == types


def test_bad_arguments_are_refused():
    with pytest.raises(CheckpointError, match="even"):
        rotary.inverse_frequencies(7, 10.0)
    with pytest.raises(CheckpointError, match="at least 1"):
        rotary.is_global_layer(0, 0)
    with pytest.raises(CheckpointError, match="negative"):
        rotary.window_mask(4, -2)


@pytest.mark.parametrize("layer_idx", [0, 1])  # global, local
def test_parts_compose_to_hf_eager_attention(layer_idx):
    """Wqkv split [3, H, K] + RoPE + window + softmax(q.k / sqrt K) == HF's weights."""
    config = _config(attention_bias=True)
    torch.manual_seed(layer_idx)
    attn = hf.ModernBertAttention(config, layer_idx=layer_idx).eval()
    with torch.no_grad():
        attn.Wqkv.weight.mul_(4.0)  # peaked attention: zeros and near-zeros differ
        attn.Wqkv.bias.normal_(0.0, 1.0)
    x = torch.randn(1, T, D)
    layer_type = config.layer_types[layer_idx]
    cos_ref, sin_ref = hf.ModernBertRotaryEmbedding(config)(x, torch.arange(T)[None], layer_type)
    maker = (
        create_bidirectional_sliding_window_mask
        if layer_type == "sliding_attention"
        else hf.create_bidirectional_mask
    )
    mask = maker(config=config, inputs_embeds=x, attention_mask=torch.ones(1, T, dtype=torch.long))
    with torch.no_grad():
        _, ref = attn(x, position_embeddings=(cos_ref, sin_ref), attention_mask=mask)
    ref = ref[0].numpy()  # [H, T, T]

    qkv = x[0].numpy() @ attn.Wqkv.weight.detach().numpy().T + attn.Wqkv.bias.detach().numpy()
    q, k, _ = qkv.reshape(T, 3, H, K).transpose(1, 0, 2, 3)  # thirds, each [T, H, K]
    theta = config.rope_parameters[layer_type]["rope_theta"]
    cos, sin = rotary.rope_angles(T, K, theta)
    q, k = (np.asarray(rotary.apply_rotary(a, cos, sin), np.float64) for a in (q, k))
    scores = np.einsum("thk,shk->hts", q, k) / np.sqrt(K)
    allowed = (
        np.ones((T, T), bool)
        if rotary.is_global_layer(layer_idx, 3)
        else rotary.window_mask(T, config.local_attention)
    )
    scores = np.where(allowed[None], scores, -np.inf)
    alpha = np.exp(scores - scores.max(-1, keepdims=True))
    alpha /= alpha.sum(-1, keepdims=True)
    np.testing.assert_allclose(alpha, ref, rtol=0, atol=2e-6)
    np.testing.assert_array_equal(ref[:, ~allowed], 0.0)  # HF: exact zeros outside
    assert allowed.all() == (layer_idx == 0)  # the local layer does cut pairs off


@pytest.mark.parametrize("biases", [False, True])
def test_fixture_checkpoint_layout(tmp_path, biases):
    """The tiny checkpoint: tokenizer layout, tensors, both layer kinds, window cut."""
    from hf_fixtures import _CORPUS, EXAMPLE_A, EXAMPLE_B
    from modernbert_fixture import BIASES_ON, load_modernbert_torch, make_modernbert_checkpoint
    from safetensors import safe_open
    from transformers import AutoTokenizer

    path = make_modernbert_checkpoint(tmp_path / "mb", mlm=True, **(BIASES_ON if biases else {}))
    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    n = len(tok)
    assert [
        tok.unk_token_id,
        tok.cls_token_id,
        tok.sep_token_id,
        tok.pad_token_id,
        tok.mask_token_id,
    ] == list(range(n - 5, n))
    enc = tok(EXAMPLE_A, EXAMPLE_B, return_token_type_ids=True)
    ids, types = enc["input_ids"], enc["token_type_ids"]
    sep = ids.index(tok.sep_token_id)
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id and 0 < sep < len(ids) - 1
    assert types == [0] * (sep + 1) + [1] * (len(ids) - sep - 1)
    assert "token_type_ids" not in tok(EXAMPLE_A)
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert "model.layers.0.attn_norm.weight" not in names  # layer 0: Identity
    assert "model.layers.1.attn_norm.weight" in names and "decoder.weight" not in names  # tied
    assert ("model.layers.1.attn.Wqkv.bias" in names) == biases
    assert ("model.final_norm.bias" in names) == biases and "decoder.bias" in names

    model = load_modernbert_torch(path)
    assert model.config._attn_implementation == "eager"
    assert model.config.layer_types == [
        "full_attention",
        "sliding_attention",
        "sliding_attention",
        "full_attention",
    ]
    text = _CORPUS[3]
    with torch.no_grad():
        out = model(**tok(text, return_tensors="pt"), output_attentions=True)
    length = out.attentions[0].shape[-1]
    outside = ~rotary.window_mask(length, model.config.local_attention)
    assert 16 < length < 48 and outside.any()
    for layer, alpha in enumerate(out.attentions):
        cut = alpha[0][:, outside]
        assert (cut == 0).all() if layer in (1, 2) else (cut > 0).all()
