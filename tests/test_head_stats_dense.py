"""The dense path's head statistics (`jaxattn.engine.head_stats.dense`): the per-offset
terms read off the map's diagonals are exactly each row's weight at that key, the same
numbers as the generic per-key sums the blockwise path uses, and a capture program
traces the statistics once per shape, not once per layer. Their values against numpy
of the maps: tests/test_row_head_stats.py."""

import jax
import numpy as np
import pytest
from row_stats_reference import encoder_rows
from tiny_models import batch, capture, config_of, params_of

from jaxattn.engine import head_stats
from jaxattn.engine.model import Encoder
from jaxattn.spec import CaptureSpec


@pytest.mark.parametrize("t", [1, 2, 7])
@pytest.mark.parametrize("d", [-1, 0, 1])
def test_a_diagonal_is_each_rows_weight_at_that_offset(t, d):
    w = np.random.default_rng(t).random((2, 3, t, t)).astype(np.float32)
    want = np.zeros((2, 3, t), np.float32)
    for i in range(t):
        if 0 <= i + d < t:
            want[..., i] = w[..., i, i + d]
    np.testing.assert_array_equal(np.asarray(head_stats._diagonal(w, d)), want)


@pytest.mark.parametrize("decoder", [False, True])
def test_the_whole_maps_terms_are_the_per_key_sums_exactly(decoder):
    """`whole` (the dense path) changes how the terms are read, not their values: the
    same bits as the per-key sums the blockwise path adds up, on a padded example."""
    rng = np.random.default_rng(3)
    t, n = 9, 6
    w = rng.random((4, t, t)).astype(np.float32)
    mask = np.arange(t) < n
    w = np.where(mask, w, 0)
    w = w / w.sum(-1, keepdims=True)
    classes = rng.integers(0, 8, t).astype(np.int8)
    index = np.arange(t)
    count = np.float32(n)
    per_key = head_stats.row_terms(w, index, index, mask, classes, count, decoder)
    whole = head_stats.row_terms(w, index, index, mask, classes, count, decoder, whole=True)
    assert per_key.keys() == whole.keys()
    for name in per_key:
        np.testing.assert_array_equal(np.asarray(whole[name]), np.asarray(per_key[name]), name)


def test_a_program_traces_the_statistics_once_per_shape(monkeypatch):
    """Three layers, plain and norm statistics: the row terms are traced once per kind
    (its quantities, static), not once per layer as inline code did (BENCHMARKS.md,
    "Statistics-only dumps")."""
    traced = []
    real = head_stats.all_row_terms

    def counting(*args, **kwargs):
        traced.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(head_stats, "all_row_terms", counting)
    config = config_of("bert", num_hidden_layers=3)
    data = batch(config, (13, 10), pair_from=7, punct=0.25)  # a length no other test uses
    spec = CaptureSpec(
        what=("head_stats", "norm_head_stats", "attention"),
        layers=(0, 1, 2),
        heads=tuple(range(config.num_heads)),
    )
    jax.clear_caches()  # a shape an earlier test traced would count nothing
    out = capture(Encoder(config, attention="dense"), params_of(config), spec, data)
    assert len(traced) == 2
    # and each layer still gets the statistics of its own map (numpy of the trimmed map:
    # the mean of each statistic over the rows it is defined on)
    mask, classes = data[2], data[3]
    n = int(mask[1].sum())
    for layer in range(3):
        rows = encoder_rows(out["attention"][1, layer, :, :n, :n], classes[1])
        want = np.nanmean(rows, axis=1)
        np.testing.assert_allclose(out["head_stats"][1, layer], want, rtol=2e-5, atol=2e-6)
