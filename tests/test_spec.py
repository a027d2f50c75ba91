"""Request validation: every bad field gets a ValueError that names it."""

from __future__ import annotations

import pytest

from jaxattn.spec import make_spec


def spec(**kw):
    args = dict(what=None, layers=None, heads=None, dtype="float32", num_layers=3, num_heads=5)
    args.update(kw)
    return make_spec(**args)


def test_defaults_are_attention_all_layers_all_heads():
    s = spec()
    assert (s.what, s.layers, s.heads, s.dtype) == (
        ("attention",),
        (0, 1, 2),
        tuple(range(5)),
        "float32",
    )


def test_quantities_come_in_canonical_order_and_indices_sorted():
    s = spec(what=["sum_alpha_fx_norm", "attention"], layers=[2, 0], heads=4)
    assert s.what == ("attention", "sum_alpha_fx_norm")
    assert s.layers == (0, 2) and s.heads == (4,)


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(what=["attn"]), ["'attn'", "attention", "alpha_fx_norm"]),
        (dict(what=[]), ["what is empty"]),
        (dict(layers=[3]), ["layers", "3", "0..2"]),
        (dict(layers=[-1]), ["layers", "-1", "0..2"]),
        (dict(heads=[5]), ["heads", "0..4"]),
        (dict(heads=[1, 1]), ["duplicate"]),
        (dict(heads=[]), ["heads is empty"]),
        (dict(layers="01"), ["layers", "integers"]),
        (dict(layers=[1.5]), ["layers", "1.5"]),
        (dict(layers=[True]), ["layers"]),
        (dict(dtype="int8"), ["int8", "float32", "uint8"]),
    ],
)
def test_bad_fields_name_themselves_and_the_valid_range(kw, words):
    with pytest.raises(ValueError) as e:
        spec(**kw)
    for w in words:
        assert w in str(e.value)


def test_specs_are_hashable_and_equal_by_value():
    assert hash(spec(layers=[1, 0])) == hash(spec(layers=[0, 1]))
    assert spec(layers=[1, 0]) == spec(layers=(0, 1))
