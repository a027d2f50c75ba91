"""GPT-NeoX (Pythia): converted, captured in one padded call, and equal to the eager torch model.

Two tiny checkpoints (gpt_neox_fixture: D=30, H=5 heads of K=6, 3 layers, every
LayerNorm scale and bias random):
* "parallel": use_parallel_residual (Pythia's), rotary_pct 0.5 -> int(3) rotary
  dims, odd, so 4 of each head's 6 dims turn; attention biases;
  GPTNeoXForCausalLM with its untied embed_out;
* "sequential": use_parallel_residual false, rotary_pct 0.25 -> 1 rotary dim (2
  turn), rope_scaling linear (factor 2), no attention biases, the head tied to
  embed_in (tie_word_embeddings).
Each is captured over texts of mixed lengths in ONE call (bucketed and padded
together), each capture compared with the eager GPTNeoXModel run on that text
alone, every quantity the model gives (gpt_neox_reference: HF's own fused q/k/v
split per head, rotated by HF's RoPE, attentions and hidden states, float64 naive
norms); the parallel model refuses the AttnResLn-N measures, naming why. The
blockwise path, the scanned layer stack and greedy generation through the
key/value cache are checked against the same references.
"""

from __future__ import annotations

import numpy as np
import pytest
from generate_support import torch_generate
from gpt_neox_fixture import make_gpt_neox_checkpoint
from gpt_neox_reference import gpt_neox_reference
from hf_fixtures import EXAMPLE_A, EXAMPLE_B, load_tokenizer, load_torch_model, long_text
from reference import assert_decoder_statistics, assert_matches

import jaxattn
from jaxattn.config import PARALLEL_REFUSED
from jaxattn.errors import UsageError

VARIANTS = {
    "parallel": dict(),
    "sequential": dict(
        use_parallel_residual=False,
        rotary_pct=0.25,
        rope_scaling={"rope_type": "linear", "factor": 2.0},
        attention_bias=False,
        tie_word_embeddings=True,
    ),
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def setup(request, tmp_path_factory):
    path = make_gpt_neox_checkpoint(
        tmp_path_factory.mktemp(request.param), **VARIANTS[request.param]
    )
    tok = load_tokenizer(path)
    texts = [EXAMPLE_A, "Hello world!", long_text(tok, 40), EXAMPLE_B]
    engine = jaxattn.load(path, buckets=(48,))  # one shape: one compilation
    caps = engine.capture(texts, what=engine.config.quantities())
    return request.param, path, tok, texts, engine, caps


def _close(got, want, name, tol=5e-6):
    scale = max(1.0, float(np.abs(want[np.isfinite(want)]).max()))
    np.testing.assert_allclose(got, want, atol=tol * scale, rtol=0, err_msg=name)


def test_info_and_config(setup):
    variant, _, _, _, engine, _ = setup
    info, c = engine.info, engine.config
    assert info.family == "gpt_neox" and info.causal
    assert (c.hidden_size, c.num_heads, c.head_dim, c.num_layers) == (30, 5, 6, 3)
    assert (c.norm, c.norm_type, c.ffn, c.embedding_norm, c.absolute_positions) == (
        "pre",
        "layer",
        "dense",
        False,
        False,
    )
    assert (c.intermediate_size, c.activation, c.layer_norm_eps) == (37, "gelu", 1e-5)
    parallel = variant == "parallel"
    assert c.parallel_residual == parallel and c.tied_lm_head == (not parallel)
    assert c.attention_bias == parallel and c.rotary.global_theta == 500.0
    assert c.rotary.partial == (0.5 if parallel else 0.25)
    assert c.rotary.dims(c.head_dim) == (3 if parallel else 1)
    assert c.rotary.scaling == ("default" if parallel else "linear")
    assert ("lm_head" in engine.extra_params) == parallel  # embed_out, untied
    refused = set(PARALLEL_REFUSED)
    assert (refused & set(info.quantities)) == (set() if parallel else refused)


def test_every_quantity_equals_the_torch_reference(setup):
    _, path, tok, texts, engine, caps = setup
    model = load_torch_model(path)
    # The statistics have their own reference below (numpy over the captured maps).
    compared = [q for q in engine.config.quantities() if q != "scores" and "stats" not in q]
    for text, cap in zip(texts, caps, strict=True):
        ref = gpt_neox_reference(model, tok(text, return_tensors="pt"))
        assert_matches(cap, ref, compared, repr(text))
        past = np.isfinite(ref["scores"])
        np.testing.assert_array_equal(np.isfinite(cap.scores), past)
        np.testing.assert_allclose(cap.scores[past], ref["scores"][past], atol=1e-4, rtol=0)
        # the bar: every quantity within ~1e-5 of its largest value
        for name in compared:
            _close(cap.array(name), ref[name], name, tol=1e-5)


def test_the_unrotated_dims_carry_no_position(setup):
    """Past the rotated 2 ceil(dims / 2) dims a query is the projection itself: the same
    token at two positions gives the same values there (HF's q_pass)."""
    _, _, _, _, engine, _ = setup
    c = engine.config
    width = 2 * ((c.rotary.dims(c.head_dim) + 1) // 2)
    (cap,) = engine.capture(["a a a a"], what=("queries",))
    tokens = list(cap.tokens)
    same = [i for i, t in enumerate(tokens) if t == tokens[-1]]
    assert len(same) >= 2 and 0 < width < c.head_dim
    q = cap.queries  # [L, H, T, K]
    np.testing.assert_allclose(q[0, :, same[0], width:], q[0, :, same[-1], width:], atol=1e-6)
    assert not np.allclose(q[0, :, same[0], :width], q[0, :, same[-1], :width], atol=1e-3)


def test_a_parallel_residual_refuses_the_attn_res_ln_measures(setup):
    variant, *_, engine, _ = setup
    if variant != "parallel":
        (cap,) = engine.capture([EXAMPLE_A], what=("attn_res_ln_norm", "mixing_ratio"))
        assert cap.mixing_ratio.shape == (3, len(cap.tokens), 3)
        return
    for name in PARALLEL_REFUSED:
        with pytest.raises(UsageError, match=f"{name}' is not defined for a model with a para"):
            engine.capture([EXAMPLE_A], what=name)


def test_decoder_statistics_equal_the_numpy_reference(setup):
    *_, caps = setup
    for cap in caps:
        assert_decoder_statistics(cap, 3, 5)


def test_the_blockwise_path_equals_the_dense_one(setup):
    """attention="blockwise" with a block of 5 (it divides no text's length): the maps,
    norms and hidden states of the dense capture (itself equal to transformers)."""
    variant, path, _, texts, engine, caps = setup
    block = jaxattn.load(path, buckets=(48,), attention="blockwise", attention_block=5)
    what = ("attention", "alpha_fx_norm", "sum_alpha_fx_norm", "hidden_states", "keys")
    what += ("decoder_norm_head_stats",)
    for got, want in zip(block.capture(texts, what=what), caps, strict=True):
        for name in what:
            _close(got.array(name), want.array(name), f"{variant} {name}")


def test_the_scanned_layer_stack_equals_the_unrolled_one(setup):
    variant, path, _, texts, engine, caps = setup
    scan = jaxattn.load(path, buckets=(48,), layer_loop="scan")
    assert "layer_0" not in scan.step.params  # every layer has its input LayerNorm
    what = ("attention", "scores", "values", "hidden_states", "attn_res_norm")
    for got, want in zip(scan.capture(texts, what=what), caps, strict=True):
        for name in what:
            _close(got.array(name), want.array(name), f"{variant} {name}")


def test_greedy_generation_through_the_cache_is_transformers_generate(setup):
    """The key/value cache's decoding (partial RoPE at each step's own position, the
    parallel residual, the untied embed_out or the tied embed_in) gives transformers'
    greedy tokens, for a padded group of prompts of different lengths."""
    from transformers import AutoModelForCausalLM

    variant, path, _, texts, engine, _ = setup
    torch_model = AutoModelForCausalLM.from_pretrained(
        str(path), attn_implementation="eager", local_files_only=True
    ).eval()
    prompts = ["The quick brown fox", "Hello, world. Hello,", texts[2]]
    new = 7
    for g in engine.generate(prompts, new, stop_at_eos=False):
        want = torch_generate(torch_model, list(g.prompt.ids), new, eos=-1)
        assert list(g.ids) == want, (variant, g.prompt.text)


def test_a_converted_checkpoint_keeps_the_switches_and_the_numbers(setup, tmp_path):
    """`jaxattn convert` writes jaxattn.json with the parallel residual and the rotary
    fraction, and the untied head beside the params: the native load is the same model."""
    from jaxattn.checkpoints.convert import convert_checkpoint

    variant, path, _, texts, engine, caps = setup
    native = jaxattn.load(convert_checkpoint(path, tmp_path / "native"), buckets=(48,))
    c = native.config
    assert (c.parallel_residual, c.rotary) == (
        engine.config.parallel_residual,
        engine.config.rotary,
    )
    assert ("lm_head" in native.extra_params) == ("lm_head" in engine.extra_params)
    what = ("attention", "queries", "hidden_states", "sum_alpha_fx_norm")
    for got, want in zip(native.capture(texts, what=what), caps, strict=True):
        for name in what:
            _close(got.array(name), want.array(name), f"{variant} {name}", tol=1e-6)
