"""ModernBERT's config.json -> ModelConfig: the rotary settings, both config formats, refusals.

Through `translate` on plain dicts: no torch model, no files. transformers 5
writes layer_types and rope_parameters (and still global_attn_every_n_layers);
hub checkpoints saved by transformers 4 have global_attn_every_n_layers,
global_rope_theta and local_rope_theta instead.
"""

from __future__ import annotations

import pytest

from jaxattn.checkpoints.hf_config import translate
from jaxattn.errors import CheckpointError
from jaxattn.positions import Rotary

G, S = "full_attention", "sliding_attention"
NEW = dict(
    model_type="modernbert",
    vocab_size=338,
    hidden_size=18,
    num_hidden_layers=4,
    num_attention_heads=3,
    intermediate_size=23,
    max_position_embeddings=67,
    hidden_activation="gelu",
    norm_eps=1e-5,
    norm_bias=False,
    attention_bias=False,
    mlp_bias=False,
    pad_token_id=333,
    local_attention=8,
    global_attn_every_n_layers=3,
    layer_types=[G, S, S, G],
    rope_parameters={
        G: {"rope_type": "default", "rope_theta": 1000.0},
        S: {"rope_type": "default", "rope_theta": 30.0},
    },
)
# transformers 4's layout of the same model, with the extra fields hub configs carry.
OLD = {k: v for k, v in NEW.items() if k not in ("layer_types", "rope_parameters")}
OLD |= dict(
    global_rope_theta=1000.0,
    local_rope_theta=30.0,
    layer_norm_eps=1e-5,
    position_embedding_type="absolute",
    reference_compile=None,
    repad_logits_with_grad=False,
)
ROTARY = Rotary(global_theta=1000.0, local_theta=30.0, global_every=3, local_window=8)


def _translate(**changes):
    hf = {**NEW, **changes}
    return translate({k: v for k, v in hf.items() if v is not ...}, name="mb")


def test_both_formats_give_the_same_model():
    for hf in (NEW, OLD):
        c = translate(hf, name="mb")
        assert c.rotary == ROTARY and c.family == "modernbert"
        assert (c.norm, c.ffn, c.absolute_positions, c.type_vocab_size) == ("pre", "glu", False, 0)
        assert c.layer_norm_eps == 1e-5 and not (c.norm_bias or c.attention_bias or c.mlp_bias)
        assert (c.qkv_width, c.ffn_width, c.pad_token_id) == (54, 46, 333)


def test_modernbert_config_defaults_apply():
    bare = {
        k: NEW[k]
        for k in (
            "model_type",
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
        )
    }
    c = translate(bare, name="mb")
    assert c.rotary == Rotary(
        global_theta=160000.0, local_theta=10000.0, global_every=3, local_window=128
    )
    assert (c.layer_norm_eps, c.pad_token_id) == (1e-5, 50283)
    assert not (c.norm_bias or c.attention_bias or c.mlp_bias)


def test_layer_types_win_over_the_bc_field_and_rope_parameters_over_legacy_thetas():
    c = _translate(layer_types=[G, S, G, S], global_attn_every_n_layers=3, global_rope_theta=5.0)
    assert (c.rotary.global_every, c.rotary.global_theta) == (2, 1000.0)
    assert _translate(layer_types=[G, S, S, S]).rotary.global_every == 4  # one global layer
    assert _translate(layer_types=[G] * 4).rotary.global_every == 1
    # An entry without rope_theta takes the legacy field, as HF's setdefault.
    c = _translate(rope_parameters={G: {"rope_type": "default"}}, local_rope_theta=7.0)
    assert (c.rotary.global_theta, c.rotary.local_theta) == (160000.0, 7.0)


def test_every_field_transformers_writes_is_known():
    transformers = pytest.importorskip("transformers")
    fields = {
        k: NEW[k]
        for k in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
        )
    }
    for extra in ({}, dict(norm_bias=True, attention_bias=True, global_attn_every_n_layers=2)):
        hf = transformers.ModernBertConfig(**fields, **extra).to_dict()
        c = translate(hf, name="mb")
        assert c.rotary.global_every == extra.get("global_attn_every_n_layers", 3)
        assert c.norm_bias == extra.get("norm_bias", False)


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        (dict(layer_types=[S, G, G, S]), "layer_types="),
        (dict(layer_types=[G, G, S, G]), "global_attn_every_n_layers pattern"),
        (dict(layer_types=[G, S, S]), "layer_types names 3 layers, but num_hidden_layers is 4"),
        (
            dict(layer_types=[G, "chunked_attention", S, G]),
            'layer_types has "chunked_attention", which jaxattn does not compute',
        ),
        (dict(layer_types=..., global_attn_every_n_layers=0), "global_attn_every_n_layers=0"),
        (
            dict(rope_parameters={G: {"rope_type": "yarn", "rope_theta": 10.0, "factor": 2.0}}),
            "only the keys rope_type and rope_theta",
        ),
        (
            dict(rope_parameters={G: {"rope_type": "linear", "rope_theta": 10.0}}),
            'rope_parameters.full_attention.rope_type="linear" is not supported',
        ),
        (dict(rope_parameters={"rope_type": "default", "rope_theta": 10.0}), "rope_parameters="),
        (dict(rope_parameters={S: {"rope_theta": -1.0}}), "must be a positive number"),
        (dict(rope_parameters=..., global_rope_theta="big"), "global_rope_theta is"),
        (dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), "rope_scaling="),
        (dict(local_attention=-2), "local_attention=-2 is not supported"),
        (dict(local_attention=8.5), "local_attention is 8.5, but it must be a whole number"),
        (
            dict(sliding_window=8),
            "sliding_window=8 is not supported: jaxattn computes only local_attention // 2 = 4",
        ),
        (dict(head_dim=8), "head_dim=8 is not supported"),
        (dict(hidden_activation="quick_gelu"), "unsupported activation 'quick_gelu'"),
        (dict(norm_bias="no"), "norm_bias is"),
        (dict(attention_pattern="dilated"), "field 'attention_pattern'"),
    ],
)
def test_unsupported_settings_are_refused_by_name(changes, says):
    with pytest.raises(CheckpointError) as err:
        _translate(**changes)
    assert says in str(err.value), str(err.value)


def test_settings_that_change_nothing_pass():
    assert _translate(sliding_window=4, head_dim=6, rope_scaling=None).rotary == ROTARY
    assert _translate(local_attention=9).rotary.local_window == 9  # the same 4 each side as 8
    assert _translate(local_attention=0).rotary.local_window == 0  # each query sees itself
    for field in (
        "sparse_prediction",
        "deterministic_flash_attn",
        "classifier_bias",
        "decoder_bias",
        "classifier_pooling",
        "mlp_dropout",
    ):
        assert _translate(**{field: True}).rotary == ROTARY
