"""Llama: converted, captured in one padded call, and equal to the eager torch model.

Two tiny checkpoints (llama_fixture: grouped-query attention with H=4 query and
H_kv=2 key/value heads, 3 layers, every RMSNorm weight random):
* "gqa": D=40, K=10 from D/H, no biases, plain RoPE, LlamaForCausalLM with
  its untied head;
* "given": D=36 with head_dim 8 given (H K = 32 != D), attention_bias and
  mlp_bias (q/k/v/o and gate/up/down biases random), rope_type llama3 (scaled
  frequencies), the bare LlamaModel.
Each is captured over texts of mixed lengths in ONE call (bucketed and padded
together), each capture compared with the eager LlamaModel run on that text
alone, every quantity (llama_reference: HF's own q/k/v rotated by HF's RoPE,
attentions and hidden states, float64 naive norms). Causality is exact.
"""

from __future__ import annotations

import numpy as np
import pytest
from hf_fixtures import EXAMPLE_A, EXAMPLE_B, load_tokenizer, load_torch_model, long_text
from llama_fixture import make_llama_checkpoint
from llama_reference import llama_reference
from reference import assert_matches
from served_info import served_info

import jaxattn
from jaxattn.analysis import decoder_head_statistics
from jaxattn.analysis.weights import normalise_rows
from jaxattn.errors import InputError, UsageError
from jaxattn.quantities import DECODER_HEAD_STATS

LLAMA3 = dict(
    rope_type="llama3",
    rope_theta=500.0,
    factor=4.0,
    low_freq_factor=1.0,
    high_freq_factor=4.0,
    original_max_position_embeddings=16,
)
VARIANTS = {
    "gqa": dict(),
    "given": dict(
        lm_head=False,
        hidden_size=36,
        head_dim=8,
        attention_bias=True,
        mlp_bias=True,
        rope_parameters=LLAMA3,
    ),
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def setup(request, tmp_path_factory):
    path = make_llama_checkpoint(tmp_path_factory.mktemp(request.param), **VARIANTS[request.param])
    tok = load_tokenizer(path)
    texts = [EXAMPLE_A, "Hello world!", long_text(tok, 40), EXAMPLE_B]
    engine = jaxattn.load(path, buckets=(48,))  # one shape: one compilation
    caps = engine.capture(texts, what=engine.config.quantities())
    return request.param, path, tok, texts, engine, caps


def test_info_and_config(setup):
    variant, _, _, _, engine, caps = setup
    info, c = engine.info, engine.config
    assert info.family == "llama" and info.causal
    assert (c.num_heads, c.kv_heads, c.group_size) == (4, 2, 2)
    assert (c.norm, c.norm_type, c.ffn, c.embedding_norm, c.type_vocab_size) == (
        "pre",
        "rms",
        "gated",
        False,
        0,
    )
    assert (c.intermediate_size, c.activation, c.layer_norm_eps) == (29, "silu", 1e-5)
    if variant == "given":
        assert (c.hidden_size, c.head_dim, c.attention_bias) == (36, 8, True)
        assert (c.rotary.scaling, c.rotary.factor, c.rotary.original_max_positions) == (
            "llama3",
            4.0,
            16,
        )
    else:
        assert (c.hidden_size, c.head_dim, c.attention_bias, c.rotary.scaling) == (
            40,
            10,
            False,
            "default",
        )
    assert caps[0].keys.shape[1] == 2 and caps[0].queries.shape[1] == 4
    assert "head_stats" not in info.quantities and len(caps[2].tokens) >= 40


def test_tokens_equal_the_checkpoints_own_tokenizer(setup):
    _, _, tok, texts, _, caps = setup
    for text, cap in zip(texts, caps, strict=True):
        ids = tok(text)["input_ids"]
        assert list(cap.tokens) == tok.convert_ids_to_tokens(ids), text
    assert caps[0].tokens[0] == "<s>"  # the tokenizer's post-processor adds BOS


def test_every_quantity_equals_the_torch_reference(setup):
    _, path, tok, texts, engine, caps = setup
    model = load_torch_model(path)
    # The statistics have their own reference below (numpy over the captured maps).
    compared = [q for q in engine.config.quantities() if q != "scores" and "stats" not in q]
    for text, cap in zip(texts, caps, strict=True):
        ref = llama_reference(model, tok(text, return_tensors="pt"))
        assert_matches(cap, ref, compared, repr(text))
        past = np.isfinite(ref["scores"])
        np.testing.assert_array_equal(np.isfinite(cap.scores), past)
        np.testing.assert_allclose(cap.scores[past], ref["scores"][past], atol=1e-4, rtol=0)


def test_decoder_statistics_equal_the_numpy_reference_over_query_heads(setup):
    """Grouped-query attention's maps are per query head: so are the statistics."""
    *_, caps = setup
    for cap in caps:
        for name, weights in (
            ("decoder_head_stats", cap.attention),
            ("decoder_norm_head_stats", normalise_rows(cap.alpha_fx_norm)),
        ):
            stats = decoder_head_statistics(weights, cap.tokens)
            want = np.stack([stats[k] for k in DECODER_HEAD_STATS], -1)
            assert getattr(cap, name).shape == want.shape == (3, 4, len(DECODER_HEAD_STATS))
            np.testing.assert_allclose(getattr(cap, name), want, atol=2e-6, rtol=0, err_msg=name)


def test_the_future_is_exactly_invisible(setup):
    *_, caps = setup
    for cap in caps:
        t = len(cap.tokens)
        future = ~np.tril(np.ones((t, t), bool))
        assert (cap.attention[..., future] == 0).all()
        assert (cap.scores[..., future] == -np.inf).all()
        assert (cap.alpha_fx_norm[..., future] == 0).all()
        assert (cap.sum_alpha_fx_norm[..., future] == 0).all()


def test_a_padded_batch_gives_the_single_text_result(setup):
    """Each text alone equals its row of the padded batch: only float32 rounding of
    another batch shape differs (a few ulps through three layers of these weights)."""
    *_, texts, engine, caps = setup
    what = ("attention", "scores", "keys", "hidden_states", "attn_res_ln_norm", "mixing_ratio")
    for text, cap in zip(texts, caps, strict=True):
        (alone,) = engine.capture([text], what=what)
        for name in what:
            got, want = getattr(alone, name), getattr(cap, name)
            scale = max(1.0, float(np.abs(want[np.isfinite(want)]).max()))
            np.testing.assert_allclose(got, want, atol=5e-6 * scale, rtol=0, err_msg=name)


def test_pairs_are_refused(setup):
    *_, engine, _ = setup
    with pytest.raises(InputError, match="text 1 is a sentence pair, but llama is a decoder"):
        engine.capture([EXAMPLE_A, (EXAMPLE_A, EXAMPLE_B)])
    with pytest.raises(UsageError, match="quantity 'head_stats' is not computed for a decoder"):
        engine.capture([EXAMPLE_A], what="head_stats")


def test_the_scanned_layer_stack_equals_the_unrolled_one(setup):
    """layer_loop="scan": every Llama layer has its input norm, so all are stacked (the
    key/value kernels with their H_kv heads), and the scan gives the unrolled numbers."""
    _, path, _, texts, engine, caps = setup
    scan = jaxattn.load(path, buckets=(48,), layer_loop="scan")
    c = engine.config
    assert "layer_0" not in scan.step.params
    key = scan.step.params["layers"]["attention"]["key"]["kernel"]
    assert key.shape == (3, c.hidden_size, 2, c.head_dim)
    what = ("attention", "scores", "values", "hidden_states", "attn_res_ln_norm")
    for got, want in zip(scan.capture(texts, what=what), caps, strict=True):
        for name in what:
            a, b = got.array(name), want.array(name)
            scale = max(1.0, float(np.abs(b[np.isfinite(b)]).max()))
            np.testing.assert_allclose(a, b, atol=5e-6 * scale, rtol=0, err_msg=name)


def test_grouped_keys_with_a_head_selection_hold_the_key_value_heads_read(setup):
    *_, engine, caps = setup
    (cap,) = engine.capture([EXAMPLE_A], what=["attention", "keys"], heads=[1, 3])
    assert cap.kv_heads == (0, 1)  # query head h reads key/value head h // 2
    np.testing.assert_allclose(cap.attention, caps[0].attention[:, [1, 3]], atol=5e-6, rtol=0)
    np.testing.assert_allclose(cap.keys, caps[0].keys, atol=5e-6, rtol=0)
    assert caps[0].select(heads=[0]).keys.shape[:2] == (3, 1)
    assert caps[0].select(layers=[2]).keys.shape[:2] == (1, 2)


def test_the_server_and_the_client_carry_the_key_value_heads(setup):
    """ModelInfo.num_key_value_heads (field 23) goes out of the servicer and back into the
    client's ModelInfo (the handler and the client's reader, directly)."""
    *_, engine, _ = setup
    assert (engine.info.num_key_value_heads, engine.info.kv_heads) == (2, 2)
    wire, info = served_info(engine)
    assert (wire.num_key_value_heads, wire.heads, wire.causal) == (2, 4, True)
    assert info == engine.info


def test_grouped_captures_round_trip_the_wire_a_store_and_a_file(setup, tmp_path):
    """keys/values with their H_kv heads go through the wire (the server's chunks and the
    client's decoder), a dump store and an .npz file unchanged."""
    from jaxattn.cli import main
    from jaxattn.wire import StreamDecoder, chunk_example

    _, path, _, texts, _, caps = setup
    decoder = StreamDecoder()
    for i, cap in enumerate(caps[:2]):
        got = [
            c
            for m in chunk_example(i, cap, codec="none", max_chunk_bytes=1024)
            if (c := decoder.feed(m)) is not None
        ]
        assert len(got) == 1 and got[0].keys.shape == cap.keys.shape
        np.testing.assert_array_equal(got[0].values, cap.values)
    decoder.finish()
    caps[0].save(tmp_path / "c.npz")
    np.testing.assert_array_equal(jaxattn.Capture.load(tmp_path / "c.npz").keys, caps[0].keys)
    (tmp_path / "in.txt").write_text(texts[0] + "\n" + texts[1] + "\n")
    store = tmp_path / "s.zarr"
    what = "attention,keys,values,attn_res_ln_norm"
    args = ["dump", str(tmp_path / "in.txt"), "--out", str(store), "--model", str(path)]
    assert main([*args, "--what", what, "--quiet"]) == 0
    for cap, want in zip(jaxattn.open_store(store), caps[:2], strict=True):
        assert cap.keys.shape == want.keys.shape and cap.keys.shape[1] == 2
        for name in what.split(","):
            # `dump` batches and buckets the texts its own way: another program, whose float32
            # rounding differs by ~2e-5 of a value on an AVX-512 CPU.
            np.testing.assert_allclose(
                cap.array(name), want.array(name), atol=5e-6, rtol=5e-5, err_msg=name
            )


def test_the_neuron_view_gives_each_query_head_its_groups_keys(setup):
    """The views read keys per query head: head h gets key/value head h // 2."""
    from jaxattn.views.payload import query_head_keys
    from jaxattn.views.svg import neuron_values

    *_, caps = setup
    cap = caps[0]
    keys = query_head_keys(cap)
    assert keys.shape == cap.queries.shape
    for h in range(4):
        np.testing.assert_array_equal(keys[:, h], cap.keys[:, h // 2])
    last = len(cap.tokens) - 1
    got = neuron_values(cap, 1, 3, last)["softmax"]
    np.testing.assert_allclose(got, cap.attention[1, 3, last], atol=1e-5)  # the last row sees all
