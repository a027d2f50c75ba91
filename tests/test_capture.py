"""Capture: typed quantity attributes, and save / load as one portable file."""

from __future__ import annotations

import numpy as np
import pytest
from capture_samples import make

from jaxattn import Capture


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "uint8"])
def test_save_load_round_trip(tmp_path, dtype, compress):
    cap = make(dtype)
    path = tmp_path / "capture.jaxattn"  # any name: no suffix is added
    cap.save(path, compress=compress)
    assert path.exists()
    back = Capture.load(path)
    assert (back.tokens, back.sentence_b_start, back.layers, back.heads, back.dtype) == (
        cap.tokens, cap.sentence_b_start, cap.layers, cap.heads, cap.dtype)  # fmt: skip
    assert back.quantization == cap.quantization
    assert list(back.tensors) == list(cap.tensors)
    for name, array in cap.tensors.items():
        assert back.tensors[name].dtype == array.dtype
        assert back.tensors[name].tobytes() == array.tobytes()
    np.testing.assert_array_equal(back.attention, cap.attention)


def test_the_file_is_plain_npz_without_pickle(tmp_path):
    make("float32").save(tmp_path / "c.npz")
    with np.load(tmp_path / "c.npz", allow_pickle=False) as z:
        assert set(z.files) == {"__meta__", "attention", "fx_norm"}


def test_load_rejects_other_files(tmp_path):
    (tmp_path / "junk").write_bytes(b"not a capture")
    with pytest.raises(ValueError, match="not a jaxattn capture"):
        Capture.load(tmp_path / "junk")
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(ValueError, match="not a jaxattn capture"):
        Capture.load(tmp_path / "other.npz")
    with pytest.raises(FileNotFoundError):
        Capture.load(tmp_path / "missing.npz")


def test_every_quantity_is_a_typed_attribute():
    """Capture declares one attribute per quantity (editors and type checkers see them)."""
    from jaxattn.quantities import QUANTITIES

    declared = {n for n, v in vars(Capture).items() if type(v).__name__ == "_Quantity"}
    assert declared == set(QUANTITIES)
    assert Capture.alpha_fx_norm.__doc__.startswith("[L, H, T, S] ||alpha")
    cap = make("uint8")
    np.testing.assert_array_equal(cap.attention, cap.array("attention"))
    assert cap.attention.dtype == np.float32  # dequantised; the raw bytes stay in `encoded`
    with pytest.raises(AttributeError, match="'keys' was not captured; this capture holds"):
        _ = cap.keys
    with pytest.raises(AttributeError, match="has no quantity 'bogus'"):
        cap.array("bogus")


def test_the_file_keeps_the_compute_precision(tmp_path):
    import dataclasses

    cap = dataclasses.replace(make("float32"), precision="tf32")
    cap.save(tmp_path / "c.npz")
    assert Capture.load(tmp_path / "c.npz").precision == "tf32"
    assert "precision=tf32" in repr(cap)
