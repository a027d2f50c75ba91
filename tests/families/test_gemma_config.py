"""Gemma 2's and Gemma 3's config.json -> ModelConfig: fields mapped or refused by name.

Through `translate` on plain dicts (no torch model, no compile): hub-like layouts at
tiny sizes, gemma-2-2b's older one (hidden_act beside hidden_activation,
sliding_window_size, cache_implementation) and gemma-3-1b's (rope_theta,
rope_local_base_freq, sliding_window_pattern), and transformers 5's rope_parameters.
"""

from __future__ import annotations

import pytest

from jaxattn.checkpoints.hf_config import translate
from jaxattn.errors import CheckpointError

GEMMA2 = dict(
    model_type="gemma2",
    architectures=["Gemma2ForCausalLM"],
    attention_bias=False,
    attention_dropout=0.0,
    attn_logit_softcapping=50.0,
    bos_token_id=2,
    cache_implementation="hybrid",
    eos_token_id=1,
    final_logit_softcapping=30.0,
    head_dim=8,
    hidden_act="gelu_pytorch_tanh",
    hidden_activation="gelu_pytorch_tanh",
    hidden_size=36,
    initializer_range=0.02,
    intermediate_size=29,
    max_position_embeddings=8192,
    num_attention_heads=4,
    num_hidden_layers=5,
    num_key_value_heads=2,
    pad_token_id=0,
    query_pre_attn_scalar=256,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    sliding_window=4096,
    sliding_window_size=4096,
    torch_dtype="float32",
    transformers_version="4.42.4",
    use_cache=True,
    vocab_size=101,
)
GEMMA3 = dict(
    model_type="gemma3_text",
    architectures=["Gemma3ForCausalLM"],
    attention_bias=False,
    attention_dropout=0.0,
    attn_logit_softcapping=None,
    bos_token_id=2,
    cache_implementation="hybrid",
    eos_token_id=[1, 106],
    final_logit_softcapping=None,
    head_dim=8,
    hidden_activation="gelu_pytorch_tanh",
    hidden_size=36,
    initializer_range=0.02,
    intermediate_size=29,
    max_position_embeddings=32768,
    num_attention_heads=4,
    num_hidden_layers=13,
    num_key_value_heads=1,
    pad_token_id=0,
    query_pre_attn_scalar=256,
    rms_norm_eps=1e-6,
    rope_local_base_freq=10000,
    rope_scaling=None,
    rope_theta=1000000,
    sliding_window=512,
    sliding_window_pattern=6,
    torch_dtype="bfloat16",
    transformers_version="4.50.0.dev0",
    use_cache=True,
    vocab_size=101,
)


def test_gemma2_translates():
    c = translate(GEMMA2, name="g2")
    assert (c.family, c.num_layers, c.num_heads, c.kv_heads, c.head_dim) == ("gemma2", 5, 4, 2, 8)
    assert (c.activation, c.norm_offset, c.post_norms, c.embed_scale, c.qk_norm) == (
        "gelu_tanh",
        1.0,
        True,
        True,
        False,
    )
    assert (c.attn_softcap, c.query_scale, c.layer_norm_eps) == (50.0, 256.0, 1e-6)
    r = c.rotary
    assert (r.global_theta, r.local_theta, r.local_window, r.scaling) == (1e4, 1e4, 4096, "default")
    assert r.layer_global == (False, True, False, True, False)  # HF: local, global, ...
    assert c.refused_quantities()["fx_norm"].startswith("is not defined for a model whose")
    # Defaults of Gemma2Config where config.json is silent: head_dim 256, softcap 50.
    bare = {k: v for k, v in GEMMA2.items() if k not in ("head_dim", "attn_logit_softcapping")}
    c = translate(bare, name="g2")
    assert (c.head_dim, c.attn_softcap) == (256, 50.0)
    c = translate({**GEMMA2, "attn_logit_softcapping": None, "num_hidden_layers": 2}, name="g2")
    assert (c.attn_softcap, c.rotary.layer_global) == (0.0, (False, True))


def test_gemma3_translates_both_layouts():
    c = translate(GEMMA3, name="g3")
    assert (c.family, c.kv_heads, c.group_size, c.qk_norm, c.attn_softcap) == (
        "gemma3",
        1,
        4,
        True,
        0.0,
    )
    r = c.rotary
    assert (r.global_theta, r.local_theta, r.local_window, r.local_scaling) == (
        1e6,
        1e4,
        512,
        False,
    )
    assert [i for i, g in enumerate(r.layer_global) if g] == [5, 11]  # every 6th, from 1
    scaled = translate({**GEMMA3, "rope_scaling": {"rope_type": "linear", "factor": 8.0}}, name="g")
    assert (scaled.rotary.scaling, scaled.rotary.factor) == ("linear", 8.0)
    assert scaled.rotary.frequency_scaling(True) and not scaled.rotary.frequency_scaling(False)
    new = {
        k: v
        for k, v in GEMMA3.items()
        if k not in ("rope_theta", "rope_local_base_freq", "rope_scaling", "sliding_window_pattern")
    }
    new["rope_parameters"] = {
        "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 5e5},
        "sliding_attention": {"rope_type": "default", "rope_theta": 300.0},
    }
    new["layer_types"] = ["full_attention", "sliding_attention"] * 6 + ["full_attention"]
    r = translate(new, name="g").rotary
    assert (r.global_theta, r.local_theta, r.factor) == (5e5, 300.0, 4.0)
    assert r.layer_global == (True, False) * 6 + (True,)
    # The Gemma 3 attention of transformers applies no logit cap, whatever the field says.
    assert translate({**GEMMA3, "attn_logit_softcapping": 50.0}, name="g").attn_softcap == 0.0


@pytest.mark.parametrize(
    "base, changes, says",
    [
        (GEMMA2, dict(use_bidirectional_attention=True), "use_bidirectional_attention=true"),
        (GEMMA2, dict(layer_types=["full_attention"] * 4), "names 4 layers, but num_hidden"),
        (
            GEMMA2,
            dict(layer_types=["chunked_attention"] * 5),
            'layer_types has "chunked_attention"',
        ),
        (GEMMA2, dict(sliding_window=None), "sliding_window is null, but layer_types"),
        (GEMMA2, dict(sliding_window_size=8), "sliding_window_size=8 differs"),
        (GEMMA2, dict(query_pre_attn_scalar=0), "query_pre_attn_scalar is 0"),
        (GEMMA2, dict(attn_logit_softcapping=-1.0), "attn_logit_softcapping is -1.0"),
        (GEMMA2, dict(rope_scaling={"rope_type": "yarn", "factor": 2.0}), 'rope_type="yarn"'),
        (GEMMA2, dict(head_dim=7), "head_dim=7 is odd"),
        (GEMMA2, dict(mlp_bias=True), "field 'mlp_bias'"),
        (GEMMA2, dict(num_experts=4), "field 'num_experts'"),
        (
            GEMMA3,
            dict(rope_parameters={}, rope_scaling={"rope_type": "linear", "factor": 2.0}),
            "both rope_parameters and rope_scaling",
        ),
        (
            GEMMA3,
            dict(
                rope_scaling=None,
                rope_parameters={"sliding_attention": {"rope_type": "linear", "factor": 2.0}},
            ),
            'rope_type "linear": jaxattn computes plain RoPE in Gemma 3\'s sliding layers',
        ),
        (GEMMA3, dict(rope_scaling=None, rope_parameters={"global": {}}), "must be an object"),
        (GEMMA3, dict(rope_scaling={"rope_type": "yarn", "factor": 2.0}), 'rope_type="yarn"'),
        (GEMMA3, dict(sliding_window_pattern=0), "sliding_window_pattern is 0"),
        (
            dict(GEMMA3, model_type="gemma3"),
            dict(text_config={}),
            "model_type 'gemma3' is Gemma 3's multimodal model .* model_type gemma3_text",
        ),
    ],
)
def test_fields_jaxattn_does_not_compute_are_refused_by_name(base, changes, says):
    with pytest.raises(CheckpointError, match=says):
        translate({**base, **changes}, name="gemma")
