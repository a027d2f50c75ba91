"""Gemma 2 and Gemma 3 (text): converted, captured in one padded call, and equal to the
eager torch model.

One tiny checkpoint per family (gemma_fixture: D=36, H=4 query heads of head_dim 10,
H_kv=2, layers local/global/local with a sliding window of 5 keys, query_pre_attn_scalar
7, every RMSNorm weight random; Gemma 2 soft-caps its logits at 3, Gemma 3 normalises
q and k per head and has its own RoPE bases). Texts of mixed lengths, one longer than
the window by far, are captured in ONE call (bucketed and padded together); each
capture is compared with the eager model run on that text alone, every quantity
(gemma_reference: HF's own q/k/v, rotated by HF's RoPE, attentions and hidden states;
the norm quantities in float64 by their post-norm definition).
"""

from __future__ import annotations

import numpy as np
import pytest
from gemma_fixture import make_gemma_checkpoint
from gemma_reference import gemma_reference
from hf_fixtures import EXAMPLE_A, EXAMPLE_B, load_tokenizer, load_torch_model, long_text
from reference import assert_matches

import jaxattn
from jaxattn.analysis import decoder_head_statistics
from jaxattn.analysis.weights import normalise_rows
from jaxattn.errors import UsageError
from jaxattn.quantities import DECODER_HEAD_STATS

WINDOW = 5


@pytest.fixture(scope="module", params=["gemma2", "gemma3"])
def setup(request, tmp_path_factory):
    path = make_gemma_checkpoint(request.param, tmp_path_factory.mktemp(request.param))
    tok = load_tokenizer(path)
    texts = [EXAMPLE_A, "Hello world!", long_text(tok, 40), EXAMPLE_B]
    engine = jaxattn.load(path, buckets=(48,))  # one shape: one compilation
    caps = engine.capture(texts, what=engine.config.quantities())
    return request.param, path, tok, texts, engine, caps


def test_info_and_config(setup):
    family, _, _, _, engine, caps = setup
    info, c = engine.info, engine.config
    assert info.family == family and info.causal
    assert (c.num_heads, c.kv_heads, c.head_dim, c.hidden_size) == (4, 2, 10, 36)
    assert (c.norm_type, c.norm_offset, c.post_norms, c.embed_scale, c.ffn) == (
        "rms",
        1.0,
        True,
        True,
        "gated",
    )
    assert (c.activation, c.query_scale, c.qk_norm) == ("gelu_tanh", 7.0, family == "gemma3")
    assert c.attn_softcap == (3.0 if family == "gemma2" else 0.0)
    r = c.rotary
    assert (r.layer_global, r.local_window) == ((False, True, False), WINDOW)
    if family == "gemma3":
        assert (r.global_theta, r.local_theta, r.scaling, r.local_scaling) == (
            1e4,
            100.0,
            "linear",
            False,
        )
    assert "fx_norm" not in info.quantities and "alpha_fx_norm" in info.quantities
    assert len(caps[2].tokens) > 3 * WINDOW


def test_every_quantity_equals_the_torch_reference(setup):
    family, path, tok, texts, engine, caps = setup
    model = load_torch_model(path)
    compared = [q for q in engine.config.quantities() if q != "scores" and "stats" not in q]
    for text, cap in zip(texts, caps, strict=True):
        ref = gemma_reference(model, tok(text, return_tensors="pt"))
        assert_matches(cap, ref, compared, repr(text))
        past = np.isfinite(ref["scores"])
        np.testing.assert_array_equal(np.isfinite(cap.scores), past)
        np.testing.assert_allclose(cap.scores[past], ref["scores"][past], atol=1e-4, rtol=0)
    if family == "gemma2":  # the cap bites: logits reach near +-3 and never past it
        top = max(np.abs(cap.scores[np.isfinite(cap.scores)]).max() for cap in caps)
        assert 2.7 < top <= 3.0


def test_local_layers_see_the_window_and_global_layers_the_past(setup):
    *_, caps = setup
    cap = caps[2]
    t = len(cap.tokens)
    back = np.arange(t)[:, None] - np.arange(t)[None, :]
    outside = back >= WINDOW
    for layer in (0, 2):  # sliding
        assert (cap.attention[layer][:, outside] == 0).all()
        assert (cap.alpha_fx_norm[layer][:, outside] == 0).all()
        assert (cap.attention[layer][:, back == WINDOW - 1] > 0).all()
    assert (cap.attention[1][:, back >= 0] > 0).all()  # full attention
    assert (cap.attention[..., back < 0] == 0).all() and (
        cap.scores[..., back < 0] == -np.inf
    ).all()


def test_decoder_statistics_equal_the_numpy_reference(setup):
    *_, caps = setup
    for cap in caps:
        for name, weights in (
            ("decoder_head_stats", cap.attention),
            ("decoder_norm_head_stats", normalise_rows(cap.alpha_fx_norm)),
        ):
            stats = decoder_head_statistics(weights, cap.tokens)
            want = np.stack([stats[k] for k in DECODER_HEAD_STATS], -1)
            np.testing.assert_allclose(getattr(cap, name), want, atol=2e-6, rtol=0, err_msg=name)


def test_a_padded_batch_gives_the_single_text_result(setup):
    """Each text alone equals its row of the padded batch up to the float32 rounding of
    another batch shape: at these random weights Gemma's post-norms (dividing small
    attention outputs by their RMS) amplify it to ~1e-5 of the scale, as far apart as
    either is from torch (measured: 1.4e-5..3.9e-5 on scores capped at 3)."""
    *_, texts, engine, caps = setup
    what = ("attention", "scores", "keys", "hidden_states", "attn_res_ln_norm", "mixing_ratio")
    for text, cap in zip(texts, caps, strict=True):
        (alone,) = engine.capture([text], what=what)
        for name in what:
            got, want = getattr(alone, name), getattr(cap, name)
            scale = max(1.0, float(np.abs(want[np.isfinite(want)]).max()))
            np.testing.assert_allclose(got, want, atol=2e-5 * scale, rtol=0, err_msg=name)


def test_fx_norm_is_refused_with_its_reason(setup):
    *_, engine, _ = setup
    with pytest.raises(UsageError, match="'fx_norm' is not defined for a model whose attention"):
        engine.capture([EXAMPLE_A], what="fx_norm")


def test_the_scanned_layer_stack_equals_the_unrolled_one(setup):
    """layer_loop="scan": local and global layers in one scan, their kind, RoPE base and
    window as data; the post-norms and (Gemma 3) q/k norms stacked like the rest."""
    _, path, _, texts, _, caps = setup
    scan = jaxattn.load(path, buckets=(48,), layer_loop="scan")
    assert "layer_0" not in scan.step.params
    assert scan.step.params["layers"]["attention_post_ln"]["scale"].shape == (3, 36)
    what = ("attention", "scores", "queries", "hidden_states", "attn_res_ln_norm")
    for got, want in zip(scan.capture(texts, what=what), caps, strict=True):
        for name in what:
            a, b = got.array(name), want.array(name)
            scale = max(1.0, float(np.abs(b[np.isfinite(b)]).max()))
            np.testing.assert_allclose(a, b, atol=2e-5 * scale, rtol=0, err_msg=name)
