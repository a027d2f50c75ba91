"""GPT-NeoX's config.json -> ModelConfig: Pythia's hub layout and transformers 5's, the
partial rotation's angles as HF computes them, the per-head fused q/k/v split, and the
fields jaxattn does not compute refused by name.

Through `translate` on plain dicts (no torch model, no compile) but for the angles,
compared with transformers' own GPTNeoXRotaryEmbedding, and the weights, converted from
a GPTNeoXModel's state dict and compared with its own query_key_value split.
"""

from __future__ import annotations

import numpy as np
import pytest

from jaxattn.checkpoints.hf_config import translate
from jaxattn.checkpoints.hf_weights import convert_state_dict
from jaxattn.engine import rotary
from jaxattn.errors import CheckpointError

# EleutherAI/pythia-160m's config.json (transformers 4.24), at tiny sizes.
HUB = dict(
    architectures=["GPTNeoXForCausalLM"],
    bos_token_id=0,
    eos_token_id=0,
    hidden_act="gelu",
    hidden_size=30,
    initializer_range=0.02,
    intermediate_size=37,
    layer_norm_eps=1e-05,
    max_position_embeddings=2048,
    model_type="gpt_neox",
    num_attention_heads=5,
    num_hidden_layers=2,
    rotary_emb_base=10000,
    rotary_pct=0.25,
    tie_word_embeddings=False,
    torch_dtype="float16",
    transformers_version="4.24.0",
    use_cache=True,
    use_parallel_residual=True,
    vocab_size=101,
)


def test_the_pythia_hub_layout_translates():
    c = translate(HUB, name="pythia")
    assert (c.family, c.hidden_size, c.num_layers, c.num_heads, c.head_dim) == (
        "gpt_neox",
        30,
        2,
        5,
        6,
    )
    assert (c.norm, c.norm_type, c.ffn, c.activation, c.layer_norm_eps) == (
        "pre",
        "layer",
        "dense",
        "gelu",
        1e-5,
    )
    assert c.causal and c.parallel_residual and not c.tied_lm_head
    assert not c.embedding_norm and not c.absolute_positions and c.attention_bias
    r = c.rotary
    assert (r.global_theta, r.partial, r.scaling, r.dims(c.head_dim)) == (1e4, 0.25, "default", 1)
    # the absent fields take GPTNeoXConfig's defaults: rotary_pct 0.25, base 10000, parallel
    bare = {k: v for k, v in HUB.items() if k not in ("rotary_pct", "rotary_emb_base")}
    bare.pop("use_parallel_residual")
    d = translate(bare, name="p")
    assert (d.rotary.partial, d.rotary.global_theta, d.parallel_residual) == (0.25, 1e4, True)
    assert not translate({**HUB, "use_parallel_residual": False}, name="p").parallel_residual


def test_transformers_5s_layout_translates_alike():
    """transformers 5 writes rope_parameters (and is_decoder, pad_token_id null, the
    dropouts); an older rope_scaling of rope_type linear scales every frequency."""
    new = {k: v for k, v in HUB.items() if k not in ("rotary_pct", "rotary_emb_base")}
    new |= dict(
        rope_parameters={"partial_rotary_factor": 0.5, "rope_theta": 500.0, "rope_type": "default"},
        is_decoder=False,
        pad_token_id=None,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        classifier_dropout=0.1,
        attention_bias=False,
        dtype="float32",
    )
    c = translate(new, name="p")
    assert (c.rotary.partial, c.rotary.global_theta, c.rotary.dims(6), c.attention_bias) == (
        0.5,
        500.0,
        3,
        False,
    )
    linear = translate({**HUB, "rope_scaling": {"type": "linear", "factor": 2.0}}, name="p")
    assert (linear.rotary.scaling, linear.rotary.factor, linear.rotary.partial) == (
        "linear",
        2.0,
        0.25,
    )
    # what the file repeats in both places is one value
    same = {**HUB, "rope_parameters": {"rope_theta": 10000.0, "partial_rotary_factor": 0.25}}
    assert translate(same, name="p").rotary == translate(HUB, name="p").rotary


@pytest.mark.parametrize(
    "changes, says",
    [
        (dict(rope_scaling={"rope_type": "yarn", "factor": 2.0}), 'rope_type="yarn"'),
        (dict(rope_scaling={"rope_type": "linear"}), "lacks factor"),
        (dict(rope_scaling={"rope_type": "linear", "factor": 2, "beta": 1}), "has beta"),
        (dict(rope_scaling="linear"), 'rope_scaling is "linear", but it must be an object'),
        (
            dict(rope_parameters={"rope_type": "default"}, rope_scaling={"rope_type": "default"}),
            "both rope_parameters and rope_scaling",
        ),
        (
            dict(rope_parameters={"partial_rotary_factor": 0.5}),
            "rotary_pct=0.25 contradicts rope_parameters.partial_rotary_factor=0.5",
        ),
        (
            dict(rope_parameters={"rope_theta": 500.0}),
            "rotary_emb_base=10000 contradicts rope_parameters.rope_theta=500.0",
        ),
        (dict(rotary_pct=0), "rotary_pct is 0, but it must be a positive number"),
        (dict(rotary_pct=1.5), "rotary_pct is 1.5, but it must be a number in"),
        (dict(rotary_pct="all"), 'rotary_pct is "all"'),
        (dict(rotary_emb_base=-1), "rotary_emb_base is -1"),
        (dict(rotary_pct=0.1), r"rotary_pct\) of head_dim 6 gives 0 rotary dims"),
        (dict(use_parallel_residual="yes"), 'use_parallel_residual is "yes"'),
        (dict(is_decoder=True), "is_decoder=true is not supported"),
        (dict(rope_theta=500.0), "field 'rope_theta'"),
        (dict(use_flash_attention=True), "field 'use_flash_attention'"),
    ],
)
def test_fields_jaxattn_does_not_compute_are_refused_by_name(changes, says):
    with pytest.raises(CheckpointError, match=says.replace("(", r"\(").replace("[", r"\[")):
        translate({**HUB, **changes}, name="pythia")


def test_a_whole_odd_head_is_refused_and_a_fraction_of_it_fits():
    """A head of 5: rotary_pct 1 would turn 6 dims, more than the head has (HF's
    apply_rotary_pos_emb fails): refused before any weight is read. Below 1 every
    fraction fits: int(5 x 0.9) = 4 dims turn 4; int(7 x 0.99) = 6 of 7."""
    odd = {**HUB, "hidden_size": 25}
    with pytest.raises(CheckpointError, match="rotary_pct 1 of head size 5: RoPE turns pairs"):
        translate({**odd, "rotary_pct": 1.0}, name="p")
    assert translate({**odd, "rotary_pct": 0.9}, name="p").rotary.dims(5) == 4
    seven = {**HUB, "hidden_size": 35, "rotary_pct": 0.99}
    assert translate(seven, name="p").rotary.dims(7) == 6


@pytest.mark.parametrize("pct, theta", [(0.5, 500.0), (0.25, 10000.0), (1.0, 30.0)])
def test_the_partial_angles_equal_transformers(pct, theta):
    """cos/sin of GPTNeoXRotaryEmbedding (HF's own, rotary_ndims = int(K pct), odd ones
    too): jaxattn's are as wide and within an ulp of a float32 cos/sin."""
    import torch
    from transformers import GPTNeoXConfig
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding

    hf = GPTNeoXConfig(hidden_size=30, num_attention_heads=5, rotary_pct=pct, rotary_emb_base=theta)
    cos, sin = GPTNeoXRotaryEmbedding(hf)(torch.zeros(1, 37, 6), torch.arange(37)[None])
    c = translate({**HUB, "rotary_pct": pct, "rotary_emb_base": theta}, name="p")
    dims = c.rotary.dims(c.head_dim)
    assert dims == int(6 * pct) and rotary.rotated_width(dims) == cos.shape[-1]
    want_cos, want_sin = rotary.rope_angles(37, 6, theta, (), None if pct == 1 else dims)
    np.testing.assert_allclose(want_cos, cos[0].numpy(), atol=2e-7, rtol=0)
    np.testing.assert_allclose(want_sin, sin[0].numpy(), atol=2e-7, rtol=0)


def test_the_fused_projection_splits_per_head_as_transformers_does(tmp_path):
    """query_key_value's rows are [H, 3, K]: our query/key/value kernels equal HF's own
    view(..., H, 3K).chunk(3) of the projection; the old files' buffers are ignored by
    name, an lm head under another name is refused as unused."""
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXModel

    hf = GPTNeoXConfig(
        vocab_size=101,
        hidden_size=30,
        num_attention_heads=5,
        num_hidden_layers=2,
        intermediate_size=37,
        rotary_pct=0.25,
    )
    torch.manual_seed(0)
    model = GPTNeoXModel(hf).eval()
    state = {f"gpt_neox.{k}": v.numpy() for k, v in model.state_dict().items()}
    state["gpt_neox.layers.0.attention.bias"] = np.tril(np.ones((1, 1, 8, 8), bool))
    state["gpt_neox.layers.1.attention.masked_bias"] = np.array(-1e9, np.float32)
    state["gpt_neox.layers.1.attention.rotary_emb.inv_freq"] = np.ones(1, np.float32)
    config = translate({**HUB, "num_hidden_layers": 2}, name="p")
    params = convert_state_dict(dict(state), config)
    x = torch.randn(7, 30)
    with torch.no_grad():
        fused = model.layers[1].attention.query_key_value(x).view(7, 5, 18)
    layer = params["encoder"]["layer_1"]["attention"]
    for i, name in enumerate(("query", "key", "value")):
        p = layer[name]
        ours = np.einsum("td,dhk->thk", x.numpy(), p["kernel"]) + p["bias"]
        np.testing.assert_allclose(ours, fused[..., 6 * i : 6 * (i + 1)].numpy(), atol=1e-5)
    with pytest.raises(CheckpointError, match="does not use: 'lm_head.weight'"):
        convert_state_dict({**state, "lm_head.weight": np.zeros((101, 30), np.float32)}, config)
