"""Mistral's, Qwen2's and Qwen3's config.json -> ModelConfig: the sliding layers as
transformers builds them, the biases, and fields refused by name (through `translate`
on plain dicts, against the HF config classes' own layer_types)."""

from __future__ import annotations

import pytest

from jaxattn.checkpoints.hf_config import translate
from jaxattn.errors import CheckpointError

BASE = dict(
    hidden_size=40,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_hidden_layers=4,
    intermediate_size=29,
    vocab_size=101,
    max_position_embeddings=64,
)


def _hf(model_type: str, **fields) -> dict:
    from transformers import MistralConfig, Qwen2Config, Qwen3Config

    cls = {"mistral": MistralConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}[model_type]
    return cls(**{**BASE, **fields}).to_dict()


@pytest.mark.parametrize("model_type", ["qwen2", "qwen3"])
@pytest.mark.parametrize(
    "fields",
    [
        dict(use_sliding_window=False, sliding_window=5, max_window_layers=1),
        dict(use_sliding_window=True, sliding_window=5, max_window_layers=1),
        dict(use_sliding_window=True, sliding_window=5, max_window_layers=0),
        dict(use_sliding_window=True, sliding_window=5, max_window_layers=28),
        dict(use_sliding_window=True, sliding_window=5, layer_types=["sliding_attention"] * 4),
    ],
)
def test_qwen_sliding_layers_are_transformers_layer_types(model_type, fields):
    from transformers import Qwen2Config, Qwen3Config

    hf = _hf(model_type, **fields)
    cls = Qwen2Config if model_type == "qwen2" else Qwen3Config
    types = cls(**{**BASE, **fields}).layer_types
    want = tuple(5 if t == "sliding_attention" else 0 for t in types)
    c = translate(hf, name="q")
    assert c.attention_windows() == (want if any(want) else ())
    # The hub layout: no layer_types, read from use_sliding_window and max_window_layers.
    if "layer_types" not in fields:
        hub = {k: v for k, v in hf.items() if k != "layer_types"}
        hub["sliding_window"] = fields["sliding_window"]
        assert translate(hub, name="q").attention_windows() == c.attention_windows()


def test_biases_and_norms_per_family():
    m, q2, q3 = (translate(_hf(t), name=t) for t in ("mistral", "qwen2", "qwen3"))
    assert (m.attention_bias, m.mlp_bias, m.qk_norm) == (False, False, False)
    assert m.attention_windows() == (4096,) * 4  # MistralConfig's default window
    assert (q2.attention_bias, q2.attention_out_bias, q2.mlp_bias) == (True, False, False)
    assert (q3.attention_bias, q3.qk_norm, q3.head_dim) == (False, True, 128)
    q3b = translate(_hf("qwen3", attention_bias=True, head_dim=8), name="q")
    assert (q3b.attention_bias, q3b.attention_out_bias, q3b.head_dim) == (True, True, 8)
    assert translate(_hf("mistral", sliding_window=None), name="m").attention_windows() == ()


@pytest.mark.parametrize(
    "model_type, changes, says",
    [
        ("qwen2", dict(layer_types=["sliding_attention"] * 4), "but there is no sliding window"),
        (
            "qwen2",
            dict(layer_types=["full_attention"] * 3),
            "names 3 layers, but num_hidden_layers is 4",
        ),
        ("qwen3", dict(layer_types=["chunked_attention"] * 4), 'has "chunked_attention"'),
        ("qwen2", dict(use_sliding_window="yes"), 'use_sliding_window is "yes"'),
        ("qwen2", dict(use_sliding_window=True, sliding_window=0), "sliding_window is 0"),
        ("mistral", dict(sliding_window=-3), "sliding_window is -3"),
        ("mistral", dict(layer_types=["full_attention"] * 4), "field 'layer_types'"),
        ("mistral", dict(attention_bias=True), "field 'attention_bias'"),
        ("qwen2", dict(num_experts=4), "field 'num_experts'"),
        ("qwen3", dict(rope_parameters={"rope_type": "yarn", "factor": 2.0}), 'rope_type="yarn"'),
    ],
)
def test_fields_jaxattn_does_not_compute_are_refused_by_name(model_type, changes, says):
    hf = {**_hf(model_type), **changes}
    with pytest.raises(CheckpointError, match=says.replace("(", r"\(")):
        translate(hf, name=model_type)
