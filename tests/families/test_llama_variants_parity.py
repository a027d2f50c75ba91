"""Mistral, Qwen2 and Qwen3: converted, captured in one padded call, and equal to the
eager torch model, sliding windows included.

One tiny checkpoint per family (llama_variants_fixture: grouped-query attention,
every RMSNorm weight and bias random, windows of 6-9 keys against texts of 40+
tokens), captured over texts of mixed lengths in ONE call, each capture compared
with the eager model run on that text alone, every quantity (llama_reference:
HF's own q/k/v, Qwen3's q/k norms and HF's RoPE, HF's attentions built with
transformers' own sliding-window mask, hidden states, float64 naive norms).
"""

from __future__ import annotations

import numpy as np
import pytest
from hf_fixtures import EXAMPLE_A, EXAMPLE_B, load_tokenizer, load_torch_model, long_text
from llama_reference import llama_reference
from llama_variants_fixture import make_variant_checkpoint
from reference import assert_matches
from served_info import served_info

import jaxattn
from jaxattn.analysis import decoder_head_statistics
from jaxattn.analysis.weights import normalise_rows
from jaxattn.quantities import DECODER_HEAD_STATS

# family -> (H, H_kv, K, window, sliding layers)
SHAPES = {
    "mistral": (4, 2, 10, 7, (0, 1, 2)),
    "qwen2": (6, 2, 6, 9, (1, 2)),
    "qwen3": (4, 2, 8, 6, (0, 2)),
}


@pytest.fixture(scope="module", params=sorted(SHAPES))
def setup(request, tmp_path_factory):
    family = request.param
    path = make_variant_checkpoint(family, tmp_path_factory.mktemp(family))
    tok = load_tokenizer(path)
    texts = [EXAMPLE_A, "Hello world!", long_text(tok, 40), EXAMPLE_B]
    engine = jaxattn.load(path, buckets=(48,))  # one shape: one compilation
    caps = engine.capture(texts, what=engine.config.quantities())
    return family, path, tok, texts, engine, caps


def test_info_and_config(setup):
    family, _, _, _, engine, caps = setup
    heads, kv, k, window, sliding = SHAPES[family]
    info, c = engine.info, engine.config
    assert info.family == family and info.causal and info.num_key_value_heads == kv
    assert (c.num_heads, c.kv_heads, c.head_dim) == (heads, kv, k)
    assert (c.norm, c.norm_type, c.ffn, c.embedding_norm) == ("pre", "rms", "gated", False)
    local = tuple(i for i in range(3) if not c.rotary.is_global(i))
    assert (c.rotary.local_window, local) == (window, sliding)
    windows = tuple(window if i in sliding else 0 for i in range(3))
    assert info.attention_windows == c.attention_windows() == windows
    biases = {
        "mistral": (False, False, False),
        "qwen2": (True, False, False),  # q/k/v biases, no o_proj bias
        "qwen3": (True, True, True),  # attention_bias: q/k/v/o, and the q/k norms
    }[family]
    attention = engine.step.params["layer_1"]["attention"]
    assert (
        "bias" in attention["query"],
        "bias" in attention["out"],
        "query_norm" in attention,
    ) == biases
    assert c.qk_norm == (family == "qwen3") and not c.mlp_bias
    assert caps[0].keys.shape[1] == kv and caps[0].queries.shape[1] == heads
    assert len(caps[2].tokens) > window + 30  # the long text runs far past the window


def test_every_quantity_equals_the_torch_reference(setup):
    _, path, tok, texts, engine, caps = setup
    model = load_torch_model(path)
    compared = [q for q in engine.config.quantities() if q != "scores" and "stats" not in q]
    for text, cap in zip(texts, caps, strict=True):
        ref = llama_reference(model, tok(text, return_tensors="pt"))
        assert_matches(cap, ref, compared, repr(text))
        past = np.isfinite(ref["scores"])
        np.testing.assert_array_equal(np.isfinite(cap.scores), past)
        np.testing.assert_allclose(cap.scores[past], ref["scores"][past], atol=1e-4, rtol=0)


def test_the_sliding_window_is_exact(setup):
    """Sliding layers give exactly zero weight outside i - W < j <= i; full layers see
    the whole past (their weights there are not zero)."""
    family, *_, caps = setup
    _, _, _, window, sliding = SHAPES[family]
    cap = caps[2]
    t = len(cap.tokens)
    i, j = np.arange(t)[:, None], np.arange(t)[None, :]
    inside = (j <= i) & (j > i - window)  # transformers' sliding_window_causal_mask_function
    past = np.tril(np.ones((t, t), bool))
    for layer in range(3):
        alpha = cap.attention[layer]
        assert (alpha[..., ~past] == 0).all() and (cap.alpha_fx_norm[layer][..., ~past] == 0).all()
        if layer in sliding:
            assert (alpha[..., ~inside] == 0).all()
            assert (cap.sum_alpha_fx_norm[layer][~inside] == 0).all()
            np.testing.assert_allclose(alpha.sum(-1), 1.0, atol=1e-5)
        else:
            assert (alpha[..., past & ~inside] > 0).all()


def test_decoder_statistics_equal_the_numpy_reference_over_query_heads(setup):
    family, *_, caps = setup
    heads = SHAPES[family][0]
    for cap in caps[:2]:
        for name, weights in (
            ("decoder_head_stats", cap.attention),
            ("decoder_norm_head_stats", normalise_rows(cap.alpha_fx_norm)),
        ):
            stats = decoder_head_statistics(weights, cap.tokens)
            want = np.stack([stats[k] for k in DECODER_HEAD_STATS], -1)
            assert getattr(cap, name).shape == want.shape == (3, heads, len(DECODER_HEAD_STATS))
            np.testing.assert_allclose(getattr(cap, name), want, atol=2e-6, rtol=0, err_msg=name)


def test_a_padded_batch_gives_the_single_text_result(setup):
    """Each text alone equals its row of the padded batch: only float32 rounding of
    another batch shape differs (a few ulps through three layers of these weights)."""
    *_, texts, engine, caps = setup
    what = ("attention", "scores", "queries", "hidden_states", "attn_res_ln_norm")
    for text, cap in zip(texts, caps, strict=True):
        (alone,) = engine.capture([text], what=what)
        for name in what:
            got, want = getattr(alone, name), getattr(cap, name)
            scale = max(1.0, float(np.abs(want[np.isfinite(want)]).max()))
            np.testing.assert_allclose(got, want, atol=1e-5 * scale, rtol=0, err_msg=name)


def test_the_scanned_layer_stack_equals_the_unrolled_one(setup):
    """layer_loop="scan": sliding and full layers share one scan body, the window as data."""
    _, path, _, texts, _, caps = setup
    scan = jaxattn.load(path, buckets=(48,), layer_loop="scan")
    assert "layer_0" not in scan.step.params
    what = ("attention", "scores", "keys", "hidden_states", "attn_res_ln_norm")
    for got, want in zip(scan.capture(texts, what=what), caps, strict=True):
        for name in what:
            a, b = got.array(name), want.array(name)
            scale = max(1.0, float(np.abs(b[np.isfinite(b)]).max()))
            np.testing.assert_allclose(a, b, atol=5e-6 * scale, rtol=0, err_msg=name)


def test_the_windows_reach_a_client_through_the_servicer(setup):
    """ModelInfo.attention_windows (.proto field 24) through the handler and the client's
    reader: a client's ModelInfo equals the engine's."""
    family, *_, engine, _ = setup
    _, _, _, window, sliding = SHAPES[family]
    wire, info = served_info(engine)
    assert tuple(wire.attention_windows) == tuple(window if i in sliding else 0 for i in range(3))
    assert info == engine.info
