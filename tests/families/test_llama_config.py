"""Llama's config.json -> ModelConfig: fields mapped or refused by name, the llama3
RoPE scaling as HF computes it, and grouped-query head selections refused.

Through `translate` on plain dicts (no torch model, no compile) but for the
frequencies, compared with transformers' own rope initialisers. The config is a
Llama-3.2-like hub layout (the older rope_theta/rope_scaling fields) at tiny sizes.
"""

from __future__ import annotations

import numpy as np
import pytest

from jaxattn.checkpoints.hf_config import translate
from jaxattn.engine import rotary
from jaxattn.errors import CheckpointError
from jaxattn.spec import make_spec

HUB = dict(
    model_type="llama",
    architectures=["LlamaForCausalLM"],
    attention_bias=False,
    attention_dropout=0.0,
    bos_token_id=128000,
    eos_token_id=128001,
    head_dim=8,
    hidden_act="silu",
    hidden_size=36,
    initializer_range=0.02,
    intermediate_size=29,
    max_position_embeddings=131072,
    mlp_bias=False,
    num_attention_heads=4,
    num_hidden_layers=2,
    num_key_value_heads=2,
    pretraining_tp=1,
    rms_norm_eps=1e-5,
    rope_scaling={
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    rope_theta=500000.0,
    tie_word_embeddings=True,
    torch_dtype="bfloat16",
    transformers_version="4.45.0.dev0",
    use_cache=True,
    vocab_size=101,
)


def test_the_hub_layout_translates():
    c = translate(HUB, name="llama")
    assert (c.family, c.hidden_size, c.num_layers, c.num_heads, c.kv_heads) == (
        "llama",
        36,
        2,
        4,
        2,
    )
    assert (c.head_dim, c.attention_width, c.kv_width, c.group_size) == (8, 32, 16, 2)
    assert (c.norm_type, c.ffn, c.activation, c.layer_norm_eps) == ("rms", "gated", "silu", 1e-5)
    assert c.causal and not c.embedding_norm and not c.absolute_positions
    r = c.rotary
    assert (r.global_theta, r.scaling, r.factor, r.original_max_positions) == (
        500000.0,
        "llama3",
        32.0,
        8192,
    )
    bare = {k: v for k, v in HUB.items() if k not in ("head_dim", "num_key_value_heads")}
    c = translate({**bare, "rope_scaling": None, "hidden_size": 40}, name="l")
    assert (c.head_dim, c.kv_heads, c.rotary.scaling, c.rotary.global_theta) == (
        10,
        4,
        "default",
        500000.0,
    )
    new = {k: v for k, v in HUB.items() if k not in ("rope_scaling", "rope_theta")}
    new["rope_parameters"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}
    r = translate(new, name="l").rotary
    assert (r.scaling, r.factor, r.global_theta) == ("linear", 2.0, 1e4)


@pytest.mark.parametrize(
    "changes, says",
    [
        (dict(pretraining_tp=2), "pretraining_tp=2 is not supported"),
        (dict(rope_scaling={"rope_type": "dynamic"}), 'rope_type "dynamic" lacks factor'),
        (dict(rope_scaling={"rope_type": "dynamic", "factor": -2.0}), "factor is -2.0"),
        (
            dict(
                rope_scaling={
                    "type": "dynamic",
                    "factor": 2.0,
                    "original_max_position_embeddings": 8,
                }
            ),
            "has original_max_position_embeddings",
        ),
        (dict(rope_scaling={"type": "yarn", "factor": 2.0}), 'rope_type="yarn"'),
        (dict(rope_scaling={"rope_type": "linear", "factor": 2.0, "beta": 1}), "has beta"),
        (dict(rope_scaling={"rope_type": "llama3", "factor": 2.0}), "lacks low_freq_factor"),
        (dict(rope_scaling={"rope_type": "linear"}), "lacks factor"),
        (dict(rope_parameters={"rope_type": "default"}), "both rope_parameters and rope_scal"),
        (dict(num_key_value_heads=3), "num_key_value_heads=3 does not divide"),
        (dict(head_dim=7), "head_dim=7 is odd"),
        (dict(rope_theta=-1.0, rope_scaling=None), "rope_theta is -1.0"),
        (dict(sliding_window=4), "field 'sliding_window'"),
        (dict(num_local_experts=4), "field 'num_local_experts'"),
    ],
)
def test_fields_jaxattn_does_not_compute_are_refused_by_name(changes, says):
    with pytest.raises(CheckpointError, match=says.replace("(", r"\(")):
        translate({**HUB, **changes}, name="llama")


def test_the_rope_scalings_equal_transformers():
    import torch
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    for params in (
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
        {"rope_type": "linear", "factor": 3.0},
    ):
        hf = LlamaConfig(
            hidden_size=64,
            num_attention_heads=2,
            head_dim=32,
            rope_parameters={**params, "rope_theta": 10000.0},
        )
        want, factor = ROPE_INIT_FUNCTIONS[params["rope_type"]](hf, torch.device("cpu"))
        assert factor == 1.0
        c = translate(
            {
                **HUB,
                "rope_scaling": None,
                "rope_theta": 1e4,
                "head_dim": 32,
                "rope_parameters": None,
                **{"rope_scaling": params},
            },
            name="l",
        )
        got = rotary.scaled_frequencies(
            rotary.inverse_frequencies(32, 1e4), c.rotary.frequency_scaling()
        )
        np.testing.assert_allclose(got, want.numpy(), rtol=2e-7, atol=0)


def test_a_head_selection_with_keys_or_values_picks_the_key_value_heads_read():
    args = dict(layers=None, dtype="float32", num_layers=2, num_heads=4, kv_heads=2)
    for name in ("keys", "values"):
        spec = make_spec(what=("attention", name), heads=[0, 1], **args)
        assert spec.heads == (0, 1) and spec.kv_heads == (0, 0) and spec.kv_axis == (0,)
        spec = make_spec(what=name, heads=None, **args)
        assert spec.heads == (0, 1, 2, 3) and spec.kv_heads == (0, 0, 1, 1)
    assert make_spec(what="queries", heads=[1], **args).heads == (1,)
    spec = make_spec(what="keys", heads=[1], **{**args, "kv_heads": 4})
    assert spec.heads == (1,) and spec.kv_heads == ()


def test_dynamic_ntk_is_the_default_rope_up_to_the_longest_input():
    """rope_type "dynamic": HF rescales only past max_position_embeddings, which is the
    model's longest input (max_length), so up to it HF's own rotary embedding gives the
    default frequencies, and so does jaxattn; a longer text is too long for the model."""
    import torch
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    dynamic = {"rope_type": "dynamic", "factor": 4.0}
    c = translate({**HUB, "max_position_embeddings": 40, "rope_scaling": dynamic}, name="l")
    assert (c.rotary.scaling, c.rotary.global_theta, c.max_length) == ("default", 500000.0, 40)
    hf = LlamaConfig(
        hidden_size=36,
        num_attention_heads=4,
        head_dim=8,
        max_position_embeddings=40,
        rope_parameters={**dynamic, "rope_theta": 500000.0},
    )
    embedding = LlamaRotaryEmbedding(hf)
    x = torch.zeros(1, 40, 8)
    cos, sin = embedding(x, torch.arange(40)[None])  # the longest input: no rescaling
    want_cos, want_sin = rotary.rope_angles(40, 8, 500000.0, c.rotary.frequency_scaling())
    np.testing.assert_allclose(cos[0].numpy(), want_cos, atol=1e-6, rtol=0)
    np.testing.assert_allclose(sin[0].numpy(), want_sin, atol=1e-6, rtol=0)
    longer, _ = embedding(torch.zeros(1, 41, 8), torch.arange(41)[None])
    assert not np.allclose(longer[0, :40].numpy(), want_cos, atol=1e-3)  # past it: rescaled
