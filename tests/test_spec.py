"""Request validation: every bad field gets a UsageError that names it; selections take
the same grammar everywhere (indices, negative ones, slices, the CLI's strings)."""

from __future__ import annotations

import numpy as np
import pytest

from jaxattn.errors import UsageError
from jaxattn.selection import parse_selection
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
        (dict(what=[]), ["no quantity asked for"]),
        (dict(what=3), ["what must be a quantity name or a list of them, got int"]),  # TypeError
        (dict(what=[["attention"]]), ["unknown quantity ['attention']"]),  # TypeError
        (dict(layers=[3]), ["layers", "3", "0..2"]),
        (dict(layers=[-4]), ["layer", "-4", "0..2", "-3..-1"]),
        (dict(heads=[5]), ["heads", "0..4"]),
        (dict(heads=[1, 1]), ["twice"]),
        (dict(heads=[1, -4]), ["twice"]),
        (dict(heads=[]), ["heads is empty"]),
        (dict(layers="0,x"), ["'x'", "index", "range"]),
        (dict(layers="2:1"), ["selects nothing"]),
        (dict(layers=range(2, 5)), ["reaches past"]),
        (dict(layers=[1.5]), ["layers", "1.5"]),
        (dict(layers=[True]), ["layers"]),
        (dict(dtype="int8"), ["int8", "float32", "uint8"]),
    ],
)
def test_bad_fields_name_themselves_and_the_valid_range(kw, words):
    with pytest.raises(UsageError) as e:
        spec(**kw)
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize(
    "layers, want",
    [
        ("0,3,-1", (0, 3, 4)),  # the CLI grammar, negative from the end
        (" 1 , -2 ", (1, 3)),  # spaces anywhere
        ("1:3", (1, 2)),  # a range, its end excluded
        (":2,-1:", (0, 1, 4)),
        (slice(-2, None), (3, 4)),
        (range(0, 5, 2), (0, 2, 4)),
        (np.int64(-1), (4,)),  # any integer type
        ([np.int32(0), np.uint8(2), slice(3, 4)], (0, 2, 3)),
        (-5, (0,)),
    ],
)
def test_selections_take_negative_indices_slices_and_any_integer_type(layers, want):
    assert spec(layers=layers, num_layers=5).layers == want


def test_the_cli_grammar_parses_to_indices_and_slices():
    assert parse_selection("0, 3,-1,8:12") == (0, 3, -1, slice(8, 12))
    with pytest.raises(UsageError, match="'1:2:3'"):
        parse_selection("1:2:3")
    with pytest.raises(UsageError, match="selects nothing"):
        parse_selection(" , ")


def test_specs_are_hashable_and_equal_by_value():
    assert hash(spec(layers=[1, 0])) == hash(spec(layers=[0, 1]))
    assert spec(layers=[1, 0]) == spec(layers=(0, 1))


def test_uint8_is_refused_where_one_range_would_serve_numbers_of_different_scales():
    assert spec(what=["mixing_ratio"], dtype="uint8").what == ("mixing_ratio",)  # in [0, 1]
    for name in ("mixing_norm", "preserving_norm", "head_stats", "norm_head_stats"):
        with pytest.raises(UsageError, match=rf"^{name} cannot be uint8: .*float16 or bfloat16"):
            spec(what=["attention", name], dtype="uint8")
    with pytest.raises(UsageError, match="^mixing_norm, preserving_norm cannot be uint8"):
        spec(what=["mixing_norm", "preserving_norm", "mixing_norm"], dtype="uint8")
