"""GPT-2's config.json and weights -> ModelConfig and params: fields mapped or refused.

Through `translate` and `convert_state_dict` on plain dicts and arrays: no torch
model, no compile. The config is the hub's gpt2 / distilgpt2 layout (their
extra fields included) at tiny sizes.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxattn.checkpoints.hf_config import translate
from jaxattn.checkpoints.hf_weights import convert_state_dict
from jaxattn.errors import CheckpointError

HUB = dict(
    model_type="gpt2",
    architectures=["GPT2LMHeadModel"],
    activation_function="gelu_new",
    attn_pdrop=0.1,
    bos_token_id=50256,
    embd_pdrop=0.1,
    eos_token_id=50256,
    initializer_range=0.02,
    layer_norm_epsilon=1e-5,
    n_ctx=64,
    n_embd=21,
    n_head=3,
    n_layer=2,
    n_positions=64,
    resid_pdrop=0.1,
    summary_activation=None,
    summary_first_dropout=0.1,
    summary_proj_to_labels=True,
    summary_type="cls_index",
    summary_use_proj=True,
    task_specific_params={"text-generation": {"do_sample": True, "max_length": 50}},
    vocab_size=101,
    _num_labels=1,  # distilgpt2
)


def test_the_hub_layout_translates():
    c = translate(HUB, name="gpt2")
    assert (c.family, c.hidden_size, c.num_layers, c.num_heads) == ("gpt2", 21, 2, 3)
    assert (c.intermediate_size, c.max_positions, c.max_length) == (84, 64, 64)  # 4 D
    assert (c.activation, c.layer_norm_eps, c.type_vocab_size) == ("gelu_tanh", 1e-5, 0)
    assert c.causal and not c.embedding_norm and c.norm == "pre" and not c.bare_first_layer
    assert translate({**HUB, "n_inner": 29}, name="g").intermediate_size == 29
    assert translate({**HUB, "n_inner": None, "pad_token_id": None}, name="g").pad_token_id == 0


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("scale_attn_weights", False, "scale_attn_weights=false is not supported"),
        ("scale_attn_by_inverse_layer_idx", True, "scale_attn_by_inverse_layer_idx=true is not"),
        ("reorder_and_upcast_attn", True, "reorder_and_upcast_attn=true is not supported"),
        ("add_cross_attention", True, "add_cross_attention=true is not supported"),
        ("activation_function", "gelu_bogus", "unsupported activation 'gelu_bogus'"),
        ("n_inner", "wide", 'n_inner is "wide", but it must be null or a whole number'),
        ("rotary_dim", 4, "field 'rotary_dim' of model_type 'gpt2' is not known"),
    ],
)
def test_fields_jaxattn_does_not_compute_are_refused_by_name(field, value, says):
    with pytest.raises(CheckpointError, match=says):
        translate({**HUB, field: value}, name="gpt2")


def _state(c, prefix="", **extra):
    rng = np.random.default_rng(0)
    d, f = c.hidden_size, c.intermediate_size

    def r(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    state = {f"{prefix}wte.weight": r(c.vocab_size, d), f"{prefix}wpe.weight": r(64, d)}
    state |= {f"{prefix}ln_f.weight": r(d), f"{prefix}ln_f.bias": r(d)}
    for i in range(c.num_layers):
        p = f"{prefix}h.{i}."
        for ln in ("ln_1", "ln_2"):
            state |= {f"{p}{ln}.weight": r(d), f"{p}{ln}.bias": r(d)}
        for mod, shape in (
            ("attn.c_attn", (d, 3 * d)),
            ("attn.c_proj", (d, d)),
            ("mlp.c_fc", (d, f)),
            ("mlp.c_proj", (f, d)),
        ):
            state |= {f"{p}{mod}.weight": r(*shape), f"{p}{mod}.bias": r(shape[1])}
    return state | extra


def test_conv1d_weights_are_split_without_a_transpose():
    c = translate(HUB, name="gpt2")
    state = _state(c)
    params = convert_state_dict(state, c)["encoder"]
    w, b = state["h.1.attn.c_attn.weight"], state["h.1.attn.c_attn.bias"]
    layer = params["layer_1"]
    for i, name in enumerate(("query", "key", "value")):
        got = layer["attention"][name]
        np.testing.assert_array_equal(got["kernel"].reshape(21, 21), w[:, i * 21 : (i + 1) * 21])
        np.testing.assert_array_equal(got["bias"].reshape(21), b[i * 21 : (i + 1) * 21])
    out = layer["attention"]["out"]["kernel"]
    np.testing.assert_array_equal(out.reshape(21, 21), state["h.1.attn.c_proj.weight"])
    np.testing.assert_array_equal(layer["ffn_in"]["kernel"], state["h.1.mlp.c_fc.weight"])
    assert "attention_ln" in params["layer_0"] and "ln" not in params["embeddings"]
    spent = dict(state)  # the loader's way: each tensor let go after its last use (c_attn's third)
    again = convert_state_dict(spent, c, consume=True)["encoder"]
    assert spent == {}
    jax.tree.map(np.testing.assert_array_equal, again, params)


def test_old_files_mask_buffers_are_ignored_and_the_head_must_be_tied():
    c = translate(HUB, name="gpt2")
    buffers = {f"transformer.h.{i}.attn.{b}": np.ones(1) for i in range(2) for b in ("bias",)}
    buffers["transformer.h.0.attn.masked_bias"] = np.ones(1)
    state = _state(c, "transformer.", **buffers)
    state["lm_head.weight"] = state["transformer.wte.weight"]
    convert_state_dict(state, c)  # no complaint
    convert_state_dict(dict(state), c, consume=True)  # the word embedding kept for the check
    state["lm_head.weight"] = state["lm_head.weight"] + 1
    with pytest.raises(CheckpointError, match="lm_head.weight is not tied to the word embedding"):
        convert_state_dict(state, c)
    with pytest.raises(CheckpointError, match="lm_head.weight is not tied to the word embedding"):
        convert_state_dict(dict(state), c, consume=True)
    with pytest.raises(
        CheckpointError,
        match=r"h.0.attn.c_attn.bias has shape \(62,\) but config.json \(3 x n_embd=63\)",
    ):
        bad = _state(c)
        bad["h.0.attn.c_attn.bias"] = bad["h.0.attn.c_attn.bias"][:-1]
        convert_state_dict(bad, c)


def test_one_ignored_field_given_as_a_string_is_that_field_not_its_substrings():
    # load(..., ignore_config_fields="rotary_dim_x") let "rotary_dim" through: a
    # substring of the string ("in" on a str), a field that changes the computation
    with pytest.raises(CheckpointError, match="field 'rotary_dim' of model_type 'gpt2'"):
        translate({**HUB, "rotary_dim": 4}, name="gpt2", ignore_fields="rotary_dim_x")
    hub = {**HUB, "my_note": "x"}
    assert translate(hub, name="gpt2", ignore_fields="my_note").hidden_size == 21
