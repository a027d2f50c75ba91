"""The blockwise path inside the model (`Encoder(attention=...)`): the same statistics,
maps of selected heads, norm quantities and hidden states as the dense path for tiny random
ModernBERT, BERT (pairs), Llama (GQA), Mistral (sliding), Gemma 2 and GPT-NeoX (partial
rotary, parallel residual) shapes at T ~ 600,
unrolled and scanned; its compiled temp memory grows ~linearly, a head's map included."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_models import batch as tiny_batch
from tiny_models import capture, config_of, params_of

from jaxattn.engine import blockwise
from jaxattn.engine.model import Encoder
from jaxattn.errors import UsageError
from jaxattn.spec import CaptureSpec

T, BLOCK = 613, 96  # the block does not divide T


def batch(config, lengths=(T, T - 37)):
    return tiny_batch(config, lengths, pair_from=200, punct=0.2)


def run(config, params, what, attention, loop="unrolled", data=None, heads=None):
    heads = tuple(range(config.num_heads)) if heads is None else heads
    spec = CaptureSpec(what=what, layers=tuple(range(config.num_layers)), heads=heads)
    model = Encoder(config, layer_loop=loop, attention=attention, block=BLOCK)
    return capture(model, params, spec, data or batch(config))


MAPS = ("attention", "scores", "alpha_fx_norm", "sum_alpha_fx_norm")
CASES = [  # family, quantities, layer loop, heads (None: all)
    (
        "modernbert",
        ("hidden_states", "queries", "keys", "fx_norm", "head_stats", "decoder_head_stats"),
        "unrolled",
        None,
    ),
    # kind as data; the per-row statistics of local layers (blocks beyond the window skipped)
    ("modernbert", ("head_stats", "norm_head_stats", "norm_row_head_stats", *MAPS), "scan", (0, 2)),
    ("bert", ("hidden_states", "head_stats", "norm_head_stats", *MAPS), "unrolled", (1,)),
    ("llama", ("values", "decoder_norm_head_stats", *MAPS), "unrolled", (1, 2)),  # GQA
    (
        "mistral",
        ("hidden_states", "decoder_head_stats", "decoder_row_head_stats", "attention"),
        "scan",
        None,
    ),
    (
        "gemma2",
        ("fx_norm", "decoder_head_stats", "decoder_norm_head_stats", *MAPS),
        "unrolled",
        (3,),
    ),
    # partial rotary, parallel residual
    ("gpt_neox", ("hidden_states", "queries", "decoder_norm_head_stats", *MAPS), "scan", (0, 4)),
]


@pytest.mark.parametrize("family, what, loop, heads", CASES)
def test_blockwise_capture_equals_the_dense_one(family, what, loop, heads):
    config = config_of(family)
    params = params_of(config)
    dense = run(config, params, what, "dense", loop, heads=heads)
    block = run(config, params, what, "blockwise", loop, heads=heads)
    assert dense.keys() == block.keys() == set(what)
    for name in what:
        assert block[name].shape == dense[name].shape, name
        assert not np.isnan(dense[name]).all(), name
        np.testing.assert_allclose(block[name], dense[name], rtol=1e-4, atol=2e-5, err_msg=name)


def test_the_policy_goes_blockwise_only_where_no_map_is_asked():
    c = config_of("llama")
    stats = ("hidden_states", "decoder_head_stats")
    assert blockwise.choose_block("blockwise", c, stats, 100) == blockwise.BLOCK
    assert blockwise.choose_block("auto", c, stats, 100) == 0  # short: dense
    assert blockwise.choose_block("auto", c, stats, blockwise.AUTO_MIN_LENGTH, block=64) == 64
    assert blockwise.choose_block("auto", c, ("attention", *stats), 4096) == blockwise.BLOCK
    assert blockwise.choose_block("auto", c, ("attn_res_norm", *stats), 4096) == 0
    assert blockwise.choose_block("blockwise", c, stats, 4096, ablated=True) == 0
    assert blockwise.choose_block("dense", c, stats, 4096) == 0
    with pytest.raises(UsageError, match="unknown attention 'flash': valid are auto, dense"):
        blockwise.choose_block("flash", c, stats, 4096)


def test_the_blockwise_maps_are_those_with_a_query_and_a_key_axis():
    from jaxattn.quantities import QUANTITIES

    for name in blockwise.SERVES:
        axes = QUANTITIES[name].axes
        maps = "T" in axes and "S" in axes
        assert maps == (name in blockwise.MAPS | {"sum_alpha_fx_norm"}), name
        assert (name in blockwise.MAPS) == (maps and QUANTITIES[name].has_head_axis), name


def temp_bytes(config, params, what, attention, length, layers=None, heads=None):
    spec = CaptureSpec(
        what=what,
        layers=layers or tuple(range(config.num_layers)),
        heads=heads or tuple(range(config.num_heads)),
    )
    model = Encoder(config, attention=attention, block=128)
    ids = jnp.zeros(length, jnp.int32)

    def f(params, ids, mask, classes):
        return model.apply({"params": params}, ids, ids, mask, spec, None, classes)

    args = (params, ids, ids > -1, jnp.zeros(length, jnp.int8))
    return jax.jit(f).lower(*args).compile().memory_analysis().temp_size_in_bytes


@pytest.mark.parametrize(
    "family, what, layers, heads",
    [
        ("modernbert", ("head_stats",), None, None),
        ("llama", ("decoder_head_stats",), None, None),
        # the per-row statistics, the norm-weighted ones too: [H, T, N] out, no [T, T]
        ("modernbert", ("row_head_stats", "decoder_norm_row_head_stats"), (1,), None),
        # statistics and one head's map of a (local) layer: the map is output, written
        # in place block by block; what the program holds besides stays linear in T
        ("modernbert", ("head_stats", "attention"), (1,), (2,)),
    ],
)
def test_statistics_temp_memory_grows_linearly_blockwise(family, what, layers, heads):
    config = config_of(family)
    params = params_of(config)
    kw = dict(layers=layers, heads=heads)
    block = [temp_bytes(config, params, what, "blockwise", t, **kw) for t in (1024, 2048)]
    assert block[1] <= 2 * block[0] + (1 << 20), block  # linear, plus a constant
    if layers is None:  # the dense program's [H, T, T] maps, for scale
        dense = [temp_bytes(config, params, what, "dense", t) for t in (1024, 2048)]
        # quadratic: 4x less a linear part (3.3x for modernbert since the dense
        # statistics read their diagonals off the map, 3.6x before)
        assert dense[1] > 3 * dense[0], dense
        assert block[1] < dense[1] / 8, (block, dense)
