"""Capture.save / Capture.load (one portable file) and Capture.to_bertviz."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from jaxattn import Capture

CASTS = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def make(dtype: str) -> Capture:
    rng = np.random.default_rng(3)
    att = rng.random((2, 3, 5, 5)).astype(np.float32)
    norm = rng.random((2, 3, 5)).astype(np.float32)
    if dtype == "uint8":
        tensors = {"attention": np.round(att * 255).astype(np.uint8),
                   "fx_norm": np.round(norm * 255).astype(np.uint8)}  # fmt: skip
        quant = {"attention": (1 / 255, 0.0), "fx_norm": (0.004, 0.25)}
    else:
        tensors = {"attention": att.astype(CASTS[dtype]), "fx_norm": norm.astype(CASTS[dtype])}
        quant = {}
    return Capture(tokens=("[CLS]", "a", "[SEP]", "b", "[SEP]"), sentence_b_start=3,
                   layers=(1, 4), heads=(0, 2, 5), dtype=dtype, tensors=tensors,
                   quantization=quant)  # fmt: skip


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


def test_to_bertviz_gives_per_layer_1_h_t_t_and_tokens():
    cap = make("uint8")
    view = cap.to_bertviz(torch=False)
    assert view["tokens"] == list(cap.tokens) and view["sentence_b_start"] == 3
    assert len(view["attention"]) == 2
    for k, layer in enumerate(view["attention"]):
        assert layer.shape == (1, 3, 5, 5) and layer.dtype == np.float32
        np.testing.assert_array_equal(layer[0], cap.attention[k])  # dequantised


def test_to_bertviz_torch_tensors_for_bertviz():
    torch = pytest.importorskip("torch")
    view = make("float32").to_bertviz(torch=True)
    assert all(isinstance(a, torch.Tensor) and a.shape == (1, 3, 5, 5) for a in view["attention"])
    # What bertviz's format_attention does with them:
    stacked = torch.stack([a.squeeze(0) for a in view["attention"]])
    assert stacked.shape == (2, 3, 5, 5)


def test_to_bertviz_names_valid_quantities():
    with pytest.raises(ValueError, match="attention"):
        make("float32").to_bertviz("fx_norm", torch=False)
