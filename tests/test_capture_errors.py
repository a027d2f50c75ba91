"""What a Capture says when asked for what it lacks: the quantity, what it holds and how to
capture it, or the nearest real name; never Python's own "Did you mean" (which named
sum_alpha_fx_norm for a missing alpha_fx_norm). Python's probes still see AttributeError."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
import traceback
from pathlib import Path

import numpy as np
import pytest
from capture_samples import make

from jaxattn import Capture
from jaxattn.capture import frozen

ROOT = Path(__file__).resolve().parents[1]


def _message(cap: Capture, name: str) -> str:
    with pytest.raises(AttributeError) as e:
        getattr(cap, name)
    return str(e.value)


def test_a_quantity_not_captured_says_what_is_held_and_how_to_get_it():
    cap = make("float32")  # holds attention, fx_norm
    assert _message(cap, "alpha_fx_norm") == (
        "'alpha_fx_norm' was not captured; this capture holds attention, fx_norm: capture it "
        "too with what=('attention', 'fx_norm', 'alpha_fx_norm') in Python, or --what "
        "attention,fx_norm,alpha_fx_norm on the command line"
    )
    with pytest.raises(AttributeError, match="'keys' was not captured; .*--what attention,fx_n"):
        cap.array("keys")


@pytest.mark.parametrize(
    "name, hint",
    [
        ("atention", ": did you mean the quantity 'attention'?"),
        ("alpha_fx", ": did you mean the quantity 'alpha_fx_norm'?"),
        ("token", ": did you mean 'tokens'?"),
        ("nothing_like_it", ""),
    ],
)
def test_a_misspelt_name_gets_the_nearest_real_one(name, hint):
    assert _message(make("float32"), name) == f"'Capture' object has no attribute {name!r}{hint}"


def test_python_adds_no_suggestion_of_its_own():
    """The interpreter's "Did you mean: 'sum_alpha_fx_norm'?" came from the exception's
    name and obj; as printed by the traceback module and by the interpreter itself."""
    cap = make("float32")
    for name in ("alpha_fx_norm", "atention"):
        try:
            getattr(cap, name)
        except AttributeError as e:
            printed = "".join(traceback.format_exception_only(e))
        assert "Did you mean" not in printed and printed.count("\n") == 1, printed
    script = (
        f"import sys; sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'tests')!r}]; "
        "from capture_samples import make; make('float32').alpha_fx_norm"
    )
    err = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True).stderr
    assert err.strip().splitlines()[-1].startswith("AttributeError: 'alpha_fx_norm' was not")
    assert "Did you mean" not in err and "sum_alpha_fx_norm" not in err


def test_pythons_probes_still_work():
    cap = make("uint8")
    assert hasattr(cap, "attention") and not hasattr(cap, "alpha_fx_norm")
    assert not hasattr(cap, "atention") and getattr(cap, "keys", None) is None
    assert getattr(cap, "__array__", "absent") == "absent"  # numpy's probe: a plain miss
    with pytest.raises(AttributeError, match="^'Capture' object has no attribute '_x'$"):
        _ = cap._x
    cap = Capture(**{**vars(cap), "provenance": frozen({"model": "m", "config": {"a": 1}})})
    for twin in (copy.copy(cap), copy.deepcopy(cap), pickle.loads(pickle.dumps(cap))):
        assert twin.tokens == cap.tokens and twin.what == cap.what
        np.testing.assert_array_equal(twin.attention, cap.attention)
        assert dict(twin.provenance) == {"model": "m", "config": {"a": 1}}
        with pytest.raises(TypeError):  # still read-only
            twin.provenance["model"] = "x"
        assert "was not captured" in _message(twin, "keys")
