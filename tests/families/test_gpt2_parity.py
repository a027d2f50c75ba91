"""GPT-2: converted, captured in one padded call, and equal to the eager torch model.

The tiny checkpoint (gpt2_fixture: D=21, H=3, K=7, 3 layers, every LayerNorm
and bias random, GPT2LMHeadModel with its tied head) is captured over texts of
mixed lengths in ONE call (bucketed and padded together); each capture is
compared with the eager GPT2Model run on that text alone, every quantity
(gpt2_reference: HF's own q/k/v, attentions and hidden states, float64 naive
norms). Causality is exact: attention 0 and scores -inf in the future.
"""

from __future__ import annotations

import numpy as np
import pytest
from gpt2_fixture import make_gpt2_checkpoint
from gpt2_reference import gpt2_reference
from hf_fixtures import EXAMPLE_A, EXAMPLE_B, load_tokenizer, load_torch_model, long_text
from reference import assert_matches
from served_info import served_info

import jaxattn
from jaxattn.engine.ablation import HeadAblation
from jaxattn.errors import InputError, UsageError


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    path = make_gpt2_checkpoint(tmp_path_factory.mktemp("gpt2"))
    tok = load_tokenizer(path)
    texts = [EXAMPLE_A, "Hello world!", long_text(tok, 40), EXAMPLE_B]
    engine = jaxattn.load(path, buckets=(48,))  # one shape: one compilation
    caps = engine.capture(texts, what=engine.config.quantities())
    return path, tok, texts, engine, caps


def test_info_and_config(setup):
    _, _, _, engine, caps = setup
    info, c = engine.info, engine.config
    assert info.family == "gpt2" and info.causal
    assert (info.layers, info.heads, info.hidden, info.max_positions) == (3, 3, 21, 64)
    assert (c.norm, c.embedding_norm, c.causal, c.type_vocab_size) == ("pre", False, True, 0)
    assert (c.intermediate_size, c.activation, c.layer_norm_eps) == (29, "gelu_tanh", 1e-5)
    assert "head_stats" not in info.quantities and "norm_head_stats" not in info.quantities
    assert "mlm_head" not in engine.extra_params and len(caps[2].tokens) >= 40


def test_tokens_equal_the_checkpoints_own_tokenizer(setup):
    _, tok, texts, _, caps = setup
    for text, cap in zip(texts, caps, strict=True):
        ids = tok(text)["input_ids"]
        assert list(cap.tokens) == tok.convert_ids_to_tokens(ids), text
        assert cap.sentence_b_start is None
    assert caps[0].tokens[0] != "<|endoftext|>"  # GPT-2 adds no BOS


def test_every_quantity_equals_the_torch_reference(setup):
    path, tok, texts, engine, caps = setup
    model = load_torch_model(path)
    compared = [q for q in engine.config.quantities() if q != "scores" and "stats" not in q]
    for text, cap in zip(texts, caps, strict=True):
        ref = gpt2_reference(model, tok(text, return_tensors="pt"))
        assert_matches(cap, ref, compared, repr(text))
        # scores: -inf exactly where the reference has it, equal elsewhere
        past = np.isfinite(ref["scores"])
        np.testing.assert_array_equal(np.isfinite(cap.scores), past)
        np.testing.assert_allclose(cap.scores[past], ref["scores"][past], atol=1e-4, rtol=0)


def test_the_future_is_exactly_invisible(setup):
    _, _, _, _, caps = setup
    for cap in caps:
        t = len(cap.tokens)
        future = ~np.tril(np.ones((t, t), bool))
        assert (cap.attention[..., future] == 0).all()
        assert (cap.scores[..., future] == -np.inf).all()
        assert np.isfinite(cap.scores[..., ~future]).all()
        assert (cap.alpha_fx_norm[..., future] == 0).all()
        assert (cap.sum_alpha_fx_norm[..., future] == 0).all()
        np.testing.assert_allclose(cap.attention.sum(-1), 1.0, atol=1e-6)


def test_a_padded_batch_gives_the_single_text_result(setup):
    """Each text captured alone equals its row of the padded batch: the padding (any id,
    under the mask) is invisible; only float32 rounding of another batch shape differs."""
    _, _, texts, engine, caps = setup
    what = ("attention", "scores", "hidden_states", "attn_res_ln_norm")
    for text, cap in zip(texts, caps, strict=True):
        (alone,) = engine.capture([text], what=what)
        for name in what:
            got, want = getattr(alone, name), getattr(cap, name)
            scale = max(1.0, float(np.abs(want[np.isfinite(want)]).max()))
            np.testing.assert_allclose(got, want, atol=1e-6 * scale, rtol=0, err_msg=name)


def test_pairs_and_encoder_statistics_are_refused(setup):
    _, _, _, engine, _ = setup
    with pytest.raises(InputError, match="text 1 is a sentence pair, but gpt2 is a decoder"):
        engine.capture([EXAMPLE_A, (EXAMPLE_A, EXAMPLE_B)])
    for name in ("head_stats", "norm_head_stats"):
        with pytest.raises(UsageError, match=f"quantity '{name}' is not computed for a decoder"):
            engine.capture([EXAMPLE_A], what=name)
    with pytest.raises(UsageError, match="'scores' of a decoder .causal. model cannot be uint8"):
        engine.capture([EXAMPLE_A], what=["attention", "scores"], dtype="uint8")
    (cap,) = engine.capture([EXAMPLE_A], what=["attention", "scores"], dtype="bfloat16")
    assert (cap.scores[..., 0, 1:] == -np.inf).all()


def test_the_server_and_the_client_carry_causal(setup):
    """ModelInfo.causal (field 22) goes out of the servicer and back into the client's
    ModelInfo; no server is started (the handler and the client's reader, directly)."""
    _, _, _, engine, _ = setup
    wire, info = served_info(engine)
    assert wire.causal and wire.family == "gpt2"
    assert info == engine.info


def test_the_scanned_layer_stack_equals_the_unrolled_one(setup):
    """layer_loop="scan" (the GPU default): GPT-2's layer 0 has ln_1 like the rest, so every
    layer is in the stack, and the scan gives the unrolled program's numbers."""
    path, _, texts, _, caps = setup
    scan = jaxattn.load(path, buckets=(48,), layer_loop="scan")
    assert "layer_0" not in scan.step.params
    assert scan.step.params["layers"]["attention"]["query"]["kernel"].shape[0] == 3
    what = ("attention", "scores", "hidden_states", "attn_res_ln_norm")
    for got, want in zip(scan.capture(texts, what=what), caps, strict=True):
        for name in what:
            # Two programs: float32 rounding differs by the CPU's vector width (AVX-512 here).
            np.testing.assert_allclose(
                got.array(name), want.array(name), rtol=1e-5, atol=2e-6, err_msg=name
            )


def test_a_uniform_ablated_head_spreads_over_the_keys_its_query_may_see(setup):
    """Kovaleva et al.'s uniform head on a decoder: row i is 1/(i+1) on j <= i, 0 after."""
    engine = setup[-2]
    ablation = HeadAblation.of([(1, 2)], mode="uniform")
    (cap,) = engine.capture([EXAMPLE_A], what="attention", ablation=ablation)
    t = len(cap.tokens)
    want = np.tril(np.ones((t, t))) / np.arange(1, t + 1)[:, None]
    np.testing.assert_allclose(cap.attention[1, 2], want, atol=1e-7, rtol=0)
    assert not np.allclose(cap.attention[1, 1], want)  # the other heads are untouched
