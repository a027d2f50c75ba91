"""A model config jaxattn cannot compute is a CheckpointError (exit 1, docs/errors.md),
whether config.json's reader, jaxattn.json's or Python code builds it; the numpy
contract's own argument checks (`dequantize`) are UsageErrors. Both are still
ValueErrors, as before."""

from __future__ import annotations

import numpy as np
import pytest

from jaxattn.config import ModelConfig, tiny
from jaxattn.dtypes import dequantize
from jaxattn.errors import CheckpointError, JaxattnError, UsageError
from jaxattn.positions import Relative, Rotary

CONFIGS = [
    (dict(norm="mid"), "unknown norm 'mid': valid are post, pre"),
    (dict(ffn="moe"), "unknown ffn 'moe'"),
    (dict(norm_type="batch"), "unknown norm_type 'batch'"),
    (dict(layer_groups=4), r"layer_groups 4 must lie in 0\.\.3"),
    (dict(family="t5"), "unknown family 't5'"),
    (dict(activation="swish"), "unknown activation 'swish'"),
    (dict(num_heads=0), "num_heads 0 must be positive"),
    (dict(num_heads=4), "hidden_size 15 is not divisible by num_heads 4"),
    (dict(norm_offset=1.0), "norm_offset is an RMSNorm's"),
    (dict(attn_softcap=-1.0), "attn_softcap and query_scale must not be negative"),
    (dict(head_size=-1), "head_size and num_kv_heads must not be negative"),
    (dict(num_kv_heads=2), "num_heads 3 is not divisible by num_kv_heads 2"),
    (dict(relative=dict(att_types=("c2q",))), r"unknown att_types \['c2q'\]"),
    (dict(rotary=dict(scaling="yarn")), "unknown rope scaling 'yarn'"),
]


@pytest.mark.parametrize(("overrides", "match"), CONFIGS, ids=[m for _, m in CONFIGS])
def test_a_config_jaxattn_cannot_compute_is_a_checkpoint_error(overrides, match):
    with pytest.raises(CheckpointError, match=match):
        tiny(**overrides)
    with pytest.raises(CheckpointError, match=match):  # as jaxattn.json stores it
        ModelConfig.from_dict({**tiny().to_dict(), **overrides})


def test_the_position_schemes_and_unknown_fields_are_checkpoint_errors():
    with pytest.raises(CheckpointError, match="unknown ModelConfig fields: colour"):
        ModelConfig.from_dict({**tiny().to_dict(), "colour": "red"})
    with pytest.raises(CheckpointError, match="unknown att_types"):
        Relative(att_types=("c2c",))  # content-to-content is no position term
    with pytest.raises(CheckpointError, match="global_attn_every_n_layers 0 must be at least 1"):
        Rotary(global_every=0).is_global(1)
    assert Rotary(global_every=0, layer_global=(True, False)).is_global(1) is False


def test_dequantize_without_scale_is_a_usage_error():
    q = np.array([0, 255], np.uint8)
    with pytest.raises(UsageError, match="needs its scale and offset") as err:
        dequantize(q)
    assert isinstance(err.value, JaxattnError) and isinstance(err.value, ValueError)
    np.testing.assert_allclose(dequantize(q, 1 / 255, 0.0), [0.0, 1.0])
