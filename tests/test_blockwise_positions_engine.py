"""Query rows and key positions of the maps on the blockwise path inside the model
(issue 31): the same maps as the dense path with the same selection, each text's
positions resolved from its own end as the step takes them, for tiny random BERT
(pairs, padding; rows only) and Gemma 2 (a sliding layer, GQA, soft cap, post-norms;
rows spanning blocks and the window, and keys). tests/test_blockwise_positions.py
checks `blockwise.captures` against a float64 softmax and the memory."""

import jax
import numpy as np
import pytest
from tiny_models import batch, config_of, params_of

from jaxattn.engine import map_positions
from jaxattn.engine.model import Encoder
from jaxattn.spec import CaptureSpec

T, BLOCK = 150, 23  # the block does not divide T
MODELS = [  # family, quantities, heads, query rows, key positions (per text, as asked)
    ("bert", ("attention", "sum_alpha_fx_norm", "head_stats"), (1,), (-5, 0, 70), None),
    # sliding layers, GQA, soft cap, post-norms: the rows span blocks and windows
    ("gemma2", ("alpha_fx_norm", "decoder_head_stats"), (3,), tuple(range(-30, 0)), (1, -1)),
]


@pytest.mark.parametrize("family, what, heads, rows, keys", MODELS)
def test_blockwise_selection_equals_the_dense_one(family, what, heads, rows, keys):
    """Two texts (one padded, a pair where the family has token types), each text's
    positions resolved from its own end as the step takes them (`map_positions.arrays`)."""
    config = config_of(family)
    params = params_of(config)
    lengths = (T, T - 41)
    data = batch(config, lengths, pair_from=60, punct=0.2)
    layers = (0,)  # a local layer of gemma2; one layer compiled
    spec = CaptureSpec(
        what=what, layers=layers, heads=heads, query_positions=rows, key_positions=keys
    )
    positions = map_positions.arrays(spec, lengths)

    def run(attention):
        model = Encoder(config, attention=attention, block=BLOCK)

        @jax.jit
        def f(params, ids, types, mask, classes, positions):
            def one(i, t, m, c, p):
                return model.apply({"params": params}, i, t, m, spec, None, c, p)

            return jax.vmap(one)(ids, types, mask, classes, positions)

        return jax.tree.map(np.asarray, f(params, *data, positions))

    dense, block = run("dense"), run("blockwise")
    assert dense.keys() == block.keys() == set(what)
    for name in what:
        assert block[name].shape == dense[name].shape, name
        if rows is not None and name in map_positions.MAPS:
            assert block[name].shape[-2] == len(rows), name
        assert not np.isnan(dense[name]).all(), name
        np.testing.assert_allclose(block[name], dense[name], rtol=1e-4, atol=2e-5, err_msg=name)
