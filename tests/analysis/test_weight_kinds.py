"""The one table of weight kinds (`jaxattn.analysis.weights.KINDS`) that analyses,
head statistics and views read: it names real quantities, and every reader agrees."""

from __future__ import annotations

import dataclasses

import numpy as np
from capture_samples import make

from jaxattn.analysis.head_stats import stats_kinds
from jaxattn.analysis.weights import KINDS, WEIGHT_KINDS, available_kinds, capture_weights
from jaxattn.quantities import QUANTITIES, STATISTICS
from jaxattn.views.compare import KIND_TITLES
from jaxattn.views.payload import view_weights


def test_every_kind_names_a_weight_quantity_and_its_device_statistics():
    for kind, k in KINDS.items():
        assert QUANTITIES[k.quantity].axes == "LHTS", kind
        assert k.on_device in STATISTICS, kind
    assert WEIGHT_KINDS == {kind: k.quantity for kind, k in KINDS.items()}
    assert set(KIND_TITLES) == set(KINDS)


def test_analyses_and_views_read_the_same_weights():
    cap = make("float32")
    rng = np.random.default_rng(0)
    norm = rng.random(cap.attention.shape).astype(np.float32)
    cap = dataclasses.replace(cap, tensors={**cap.tensors, "alpha_fx_norm": norm})
    assert available_kinds(cap) == tuple(KINDS) == stats_kinds(cap)
    for kind in KINDS:
        want = capture_weights(cap, kind)
        np.testing.assert_allclose(view_weights(cap, kind), want, rtol=1e-6, err_msg=kind)
        if KINDS[kind].normalised:
            np.testing.assert_allclose(want.sum(-1), 1.0, rtol=1e-12)
