"""The one dtype table (`jaxattn.dtypes.DTYPES`): its raw-bits rule and error bounds hold,
and the store, the capture file, the docs and the load test's checker read it."""

from __future__ import annotations

import numpy as np
import pytest

from jaxattn.dtypes import DTYPES, OUTPUT_DTYPES, from_bits, to_bits
from jaxattn.store.layout import from_storage, storage_dtype, to_storage


@pytest.mark.parametrize("name", list(DTYPES))
def test_files_hold_a_type_they_have_or_its_raw_bits(name):
    d = DTYPES[name]
    assert OUTPUT_DTYPES[name] == d.dtype
    x = (np.random.default_rng(1).random((3, 4)) * 100).astype(d.dtype)
    stored = to_bits(x, name)
    if d.bits is None:
        assert stored is x
    else:  # an unsigned type of the same width, one a plain numpy file can hold
        assert stored.dtype == d.bits and d.bits.kind == "u"
        assert d.bits.itemsize == d.dtype.itemsize
    np.testing.assert_array_equal(from_bits(stored, name).view(np.uint8), x.view(np.uint8))
    assert from_bits(stored, name).dtype == d.dtype
    assert storage_dtype(name) == stored.dtype
    flat = to_storage(x, name)
    assert flat.dtype == storage_dtype(name) and flat.ndim == 1
    assert from_storage(flat, name, x.shape).dtype == d.dtype


@pytest.mark.parametrize("name", [n for n, d in DTYPES.items() if d.relative_error is not None])
def test_the_relative_error_bound_holds(name):
    bound = DTYPES[name].relative_error
    x = np.random.default_rng(2).uniform(-1e4, 1e4, 100_000).astype(np.float32)
    x = x[np.abs(x) > 1e-4]  # float16's normal range
    got = x.astype(DTYPES[name].dtype).astype(np.float64)
    error = np.abs(got - x) / np.abs(x)
    assert error.max() <= bound
    assert error.max() >= bound / 4  # and it is the type's bound, not a loose one
    assert DTYPES[name].error.startswith("exact" if bound == 0 else "relative")
