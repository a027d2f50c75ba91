"""The engine's typed hand-offs: attention's parts, the axis roles of a quantity, a
quantity no branch computes (a named error), and the batch pipeline the engine owns."""

from __future__ import annotations

import gc
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxattn
from jaxattn.engine import model
from jaxattn.engine.attention import AttentionParts
from jaxattn.engine.pipeline import BatchPipeline
from jaxattn.quantities import QUANTITIES, Quantity, shape


def test_axis_roles_come_from_the_axes_string():
    q = Quantity(name="x", axes="LHTS", doc="")
    assert (q.layer_axis, q.head_axis, q.token_axes) == (0, 1, (2, 3))
    assert q.has_layer_axis and q.has_head_axis
    r = Quantity(name="y", axes="LTM", doc="")
    assert (r.layer_axis, r.head_axis, r.token_axes, r.has_head_axis) == (0, None, (1,), False)
    assert Quantity(name="z", axes="HN", doc="").has_layer_axis is False
    # Every head-selected quantity has its head axis right after the layer axis.
    for q in QUANTITIES.values():
        assert q.has_layer_axis and q.layer_axis == 0
        assert q.head_axis in (None, 1)
        assert q.token_axes == tuple(i for i, a in enumerate(q.axes) if a in "TS")
    sizes = dict(L=2, H=3, T=5, S=5, K=4, D=7)
    assert shape("hidden_states", sizes) == (3, 5, 7)  # L + extra_layer on the layer axis


def test_attention_parts_are_a_pytree_with_absent_terms_none():
    a = jnp.ones((2, 3, 3))
    parts = AttentionParts(q=a, k=a, v=a, scores=a, alpha=a, w_out=a, c2p=a + 1)
    assert parts.c2c is None and parts.score_terms().keys() == {"c2p"}
    doubled = jax.tree.map(lambda t: 2 * t, parts)  # None fields are empty subtrees
    assert isinstance(doubled, AttentionParts) and doubled.p2c is None
    np.testing.assert_array_equal(doubled.c2p, 4.0)
    stacked = jax.vmap(lambda p: p)(jax.tree.map(lambda t: t[None], parts))
    assert stacked.alpha.shape == (1, 2, 3, 3)
    with pytest.raises(Exception, match="cannot assign"):
        parts.q = a  # frozen


def test_a_quantity_no_branch_computes_is_a_named_error(bert_checkpoint, monkeypatch):
    """Forgetting a quantity's engine branch fails at trace time naming it, not in an
    empty jnp.concatenate."""
    real = model._capture_layer

    def forgetful(want, *args):
        return {k: v for k, v in real(want, *args).items() if k != "fx_norm"}

    monkeypatch.setattr(model, "_capture_layer", forgetful)
    # The jitted per-layer capture (`model._capture_dense_layer`) keeps its traces for the
    # process: cleared before (an earlier test's calls the real one) and after (this
    # one's calls the forgetful one, which later tests of the same shapes would get).
    jax.clear_caches()
    try:
        engine = jaxattn.load(bert_checkpoint)
        with pytest.raises(
            NotImplementedError, match="^fx_norm is not computed by the engine for family 'bert'"
        ):
            engine.capture(["a short text"], what=("attention", "fx_norm"), layers=0)
    finally:
        monkeypatch.undo()
        jax.clear_caches()
    with pytest.raises(NotImplementedError, match="^fx_norm, values are not computed"):
        model._check_computed(
            frozenset({"attention", "fx_norm", "values"}),
            {"attention": None},
            engine.config,
        )


def test_the_engine_owns_its_pipeline_and_delegates(bert_checkpoint):
    engine = jaxattn.load(bert_checkpoint)
    pipeline = engine.pipeline
    assert isinstance(pipeline, BatchPipeline) and not isinstance(engine, BatchPipeline)
    assert (engine.step, engine.devices, engine.buckets) == (
        pipeline.step,
        pipeline.devices,
        pipeline.buckets,
    )
    assert engine.budgets is pipeline.budgets and engine.shapes is pipeline.shapes
    assert pipeline.provenance is engine.provenance
    spec = engine.make_spec(what="attention")
    assert engine.output_bytes(spec, 16) == pipeline.output_bytes(spec, 16)
    step = engine.step
    engine.step = replaced = type("Step", (), {"compiled_shapes": 7})()
    assert pipeline.step is replaced and engine.compiled_shapes == 7
    engine.step = step
    caps = engine.capture(["a short text"], what="attention")
    assert caps[0].provenance is engine.provenance
    # The pipeline's provenance does not keep the engine alive (no reference cycle).
    ref = weakref.ref(engine)
    gc.disable()
    try:
        del engine, caps
        assert ref() is None
    finally:
        gc.enable()
