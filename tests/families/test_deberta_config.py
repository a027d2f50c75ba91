"""DeBERTa-v2 config.json -> ModelConfig: what maps to what, and what is refused by name.

Pure translation of dicts (hf_config.translate): no torch, no checkpoint.
"""

from __future__ import annotations

import pytest

from jaxattn.checkpoints.hf_config import translate
from jaxattn.errors import CheckpointError
from jaxattn.positions import Relative

# microsoft/deberta-v3-base's config.json at tiny sizes (its fields and string forms).
V3 = {
    "model_type": "deberta-v2",
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 21,
    "initializer_range": 0.02,
    "intermediate_size": 29,
    "max_position_embeddings": 67,
    "relative_attention": True,
    "position_buckets": 8,
    "norm_rel_ebd": "layer_norm",
    "share_att_key": True,
    "pos_att_type": "p2c|c2p",
    "layer_norm_eps": 1e-7,
    "max_relative_positions": -1,
    "position_biased_input": False,
    "num_attention_heads": 3,
    "num_hidden_layers": 3,
    "type_vocab_size": 0,
    "vocab_size": 245,
}


def _translate(**changes):
    hf = {**V3, **changes}
    for key in [k for k, v in changes.items() if v is ...]:
        del hf[key]
    return translate(hf, name="tiny")


def test_v3_maps_to_relative_attention_without_absolute_positions():
    c = _translate()
    assert c.family == "deberta-v2" and (c.hidden_size, c.num_heads, c.num_layers) == (21, 3, 3)
    assert c.relative == Relative(
        att_types=("c2p", "p2c"), buckets=8, max_relative=-1, share_att_key=True, norm_rel_ebd=True
    )
    assert not c.absolute_positions and c.type_vocab_size == 0 and c.layer_norm_eps == 1e-7
    assert c.project_first and not c.projection_bias and c.embedding_width == 21
    assert c.relative_rows == 16 and c.score_terms() == ("c2c", "c2p", "p2c")
    assert {"scores_c2c", "scores_c2p", "scores_p2c"} <= set(c.quantities())


@pytest.mark.parametrize(
    "value, terms",
    [
        ("p2c|c2p", ("c2p", "p2c")),
        (" C2P ", ("c2p",)),
        (["p2c"], ("p2c",)),
        (["p2c", "c2p", "p2c"], ("c2p", "p2c")),
        (None, ()),
        ([], ()),
    ],
)
def test_pos_att_type_forms(value, terms):
    c = _translate(pos_att_type=value)
    assert c.relative.att_types == terms and c.score_terms() == ("c2c", *terms)


def test_v2_like_fields_and_hf_defaults():
    c = _translate(
        position_biased_input=True,
        type_vocab_size=2,
        share_att_key=False,
        position_buckets=...,
        max_relative_positions=12,
        norm_rel_ebd="none",
        embedding_size=13,
        attention_head_size=7,
        legacy=False,
        pooler_hidden_size=21,
        pooler_dropout=0,
        pooler_hidden_act="gelu",
        conv_act="gelu",
        conv_groups=1,
        conv_kernel_size=0,
    )
    assert c.absolute_positions and c.type_vocab_size == 2 and c.embedding_width == 13
    assert c.relative == Relative(att_types=("c2p", "p2c"), buckets=-1, max_relative=12)
    assert c.relative_rows == 24  # no buckets: 2 x max_relative_positions
    bare = _translate(
        type_vocab_size=...,
        layer_norm_eps=...,
        position_biased_input=...,
        share_att_key=...,
        norm_rel_ebd=...,
        max_relative_positions=...,
        position_buckets=...,
    )
    assert bare.type_vocab_size == 0 and bare.layer_norm_eps == 1e-7 and bare.absolute_positions
    assert bare.relative == Relative(att_types=("c2p", "p2c"), buckets=-1, max_relative=-1)
    assert bare.relative_rows == 2 * 67  # max_relative_positions < 1: max_position_embeddings


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(relative_attention=False), r"relative_attention=false is not supported.*=true"),
        (dict(relative_attention=...), r"relative_attention=false is not supported"),
        (dict(pos_att_type=["c2p", "p2p"]), r"pos_att_type=\[\"c2p\", \"p2p\"\].*c2p\" and"),
        (dict(pos_att_type="c2p|c2c"), r"pos_att_type=\[\"c2p\", \"c2c\"\] is not supported"),
        (dict(pos_att_type=["C2P"]), r"pos_att_type=\[\"C2P\"\] is not supported"),
        (dict(pos_att_type=3), r"pos_att_type is 3, but it must be a list of strings"),
        (dict(norm_rel_ebd="batch_norm"), r"norm_rel_ebd=\"batch_norm\".*layer_norm\" or"),
        (dict(conv_kernel_size=3), r"conv_kernel_size=3 is not supported.*conv_kernel_size=0"),
        (dict(attention_head_size=5), r"attention_head_size=5 is not supported.*= 7"),
        (dict(position_buckets=1), r"position_buckets=1 is not supported"),
        (dict(position_buckets=8, max_relative_positions=5), r"position_buckets=8.*resolves to 5"),
        (dict(share_att_key="yes"), r"share_att_key is \"yes\", but it must be true or false"),
        (dict(position_buckets=8.5), r"position_buckets is 8.5, but it must be a whole number"),
        (dict(z_steps=2), r"field 'z_steps' of model_type 'deberta-v2' is not known"),
        (dict(model_type="deberta"), r"unsupported model_type 'deberta'"),
    ],
)
def test_unsupported_options_are_refused_by_name(changes, message):
    with pytest.raises(CheckpointError, match=message):
        _translate(**changes)
