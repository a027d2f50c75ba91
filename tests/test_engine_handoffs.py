"""The engine's typed hand-offs: attention's parts, the axis roles of a quantity, a
quantity no branch computes (a named error), and the batch pipeline the engine owns."""

from __future__ import annotations

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
