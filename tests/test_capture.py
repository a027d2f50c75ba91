"""Capture: typed quantity attributes, and save / load as one portable file with its
provenance; unreadable files get a CaptureFileError saying what was found."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from capture_samples import make

from jaxattn import Capture
from jaxattn.capture import frozen
from jaxattn.errors import CaptureFileError, UsageError


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "uint8"])
def test_save_load_round_trip(tmp_path, dtype, compress):
    cap = make(dtype)
    path = tmp_path / "capture.jaxattn"  # any name: no suffix is added
    cap.save(path, compress=compress)
    assert path.exists()
    back = Capture.load(path)
    assert (back.tokens, back.sentence_b_start, back.layers, back.heads, back.dtype) == (
        cap.tokens,
        cap.sentence_b_start,
        cap.layers,
        cap.heads,
        cap.dtype,
    )
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


def test_load_rejects_other_files_saying_what_it_found(tmp_path):
    (tmp_path / "junk").write_bytes(b"not a capture")
    with pytest.raises(
        CaptureFileError, match="junk is not a readable jaxattn capture.*not a NumPy .npz archive"
    ):
        Capture.load(tmp_path / "junk")
    (tmp_path / "text.txt").write_text("a line of text\n")
    with pytest.raises(CaptureFileError, match="not a NumPy .npz archive") as e:
        Capture.load(tmp_path / "text.txt")
    assert "pickle" not in str(e.value)
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(CaptureFileError, match="not a jaxattn capture.*no __meta__"):
        Capture.load(tmp_path / "other.npz")
    (tmp_path / "cut.npz").write_bytes((tmp_path / "other.npz").read_bytes()[:40])
    with pytest.raises(CaptureFileError, match="cut.npz"):
        Capture.load(tmp_path / "cut.npz")
    with pytest.raises(FileNotFoundError):
        Capture.load(tmp_path / "missing.npz")
    with pytest.raises(IsADirectoryError, match="is a directory"):
        Capture.load(tmp_path)


def test_a_newer_format_is_named(tmp_path):
    np.savez(tmp_path / "new.npz", __meta__=np.array(json.dumps({"format": "jaxattn.capture/9"})))
    with pytest.raises(CaptureFileError, match="'jaxattn.capture/9'.*reads jaxattn.capture/1"):
        Capture.load(tmp_path / "new.npz")


def test_provenance_text_and_truncation_round_trip(tmp_path):
    cap = dataclasses.replace(
        make("float16"),
        text=("a b", "c"),
        truncated=True,
        provenance=frozen(
            {
                "model": "m",
                "weights": "blake2b:00",
                "config": {"num_layers": 2},
                "jaxattn": "0.3.0",
                "source": "engine",
            }
        ),
    )
    cap.save(tmp_path / "c.npz")
    back = Capture.load(tmp_path / "c.npz")
    assert back.text == ("a b", "c") and back.truncated
    assert dict(back.provenance) == dict(cap.provenance)
    with pytest.raises(TypeError):
        back.provenance["model"] = "other"  # read-only


def test_files_of_format_1_still_load(tmp_path):
    cap = make("float32")
    cap.save(tmp_path / "c.npz")
    with np.load(tmp_path / "c.npz") as z:
        arrays = dict(z)
    meta = json.loads(str(arrays["__meta__"]))
    meta["format"] = "jaxattn.capture/1"
    for key in ("text", "truncated", "provenance"):
        del meta[key]
    arrays["__meta__"] = np.array(json.dumps(meta))
    np.savez(tmp_path / "old.npz", **arrays)
    back = Capture.load(tmp_path / "old.npz")
    assert back.text is None and not back.truncated and dict(back.provenance) == {}
    np.testing.assert_array_equal(back.attention, cap.attention)


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


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_select_keeps_the_chosen_layers_and_heads_in_order(dtype):
    cap = make(dtype)  # layers (1, 4), heads (0, 2, 5)
    hidden = np.arange(3 * 5 * 2, dtype=np.float32).reshape(3, 5, 2)  # embeddings, L1, L4
    stats = np.arange(2 * 3 * 8, dtype=np.float32).reshape(2, 3, 8)
    extra = {"hidden_states": hidden, "head_stats": stats}
    if dtype == "float32":
        cap = dataclasses.replace(cap, tensors={**cap.tensors, **extra})
    sub = cap.select(layers=[4], heads=[5, 0])
    assert sub.layers == (4,) and sub.heads == (5, 0)
    np.testing.assert_array_equal(sub.attention, cap.attention[[1]][:, [2, 0]])
    np.testing.assert_array_equal(sub.fx_norm, cap.fx_norm[1:2][:, [2, 0]])
    assert sub.quantization == cap.quantization and sub.tokens == cap.tokens
    if dtype == "float32":
        np.testing.assert_array_equal(sub.hidden_states, hidden[[0, 2]])  # embeddings kept
        np.testing.assert_array_equal(sub.head_stats, stats[1:2][:, [2, 0]])
    assert cap.select().layers == cap.layers and cap.select(heads=[2]).layers == (1, 4)
    with pytest.raises(UsageError, match=r"layers \[0, 3\] were not captured \(have \[1, 4\]\)"):
        cap.select(layers=[0, 1, 3])
    with pytest.raises(UsageError, match=r"heads \[1\] were not captured"):
        cap.select(heads=[1])


@pytest.mark.parametrize(
    ("value", "message"),
    [  # each was a TypeError, or another selection than asked ("14": layers 1 and 4)
        ("14", r"layers must be a number as in cap.layers or a list of them, got str '14'"),
        (slice(0, 1), r"layers must be a number as in cap.layers .* got slice"),
        ([4.0], r"layers must hold integers as in cap.layers, got 4.0"),
        ([True], r"layers must hold integers as in cap.layers, got True"),
        ([4, 4], r"layers names a number twice: \[4, 4\]"),
        ([], r"layers is empty: leave it out \(None\) to keep every one"),
    ],
)
def test_select_refuses_what_is_no_layer_number_by_name(value, message):
    with pytest.raises(UsageError, match=message):
        make("float32").select(layers=value)  # layers (1, 4)


def test_select_takes_one_number_or_an_array_of_them():
    cap = make("float32")  # layers (1, 4), heads (0, 2, 5)
    assert cap.select(layers=4).layers == (4,)
    assert cap.select(heads=np.int64(5)).heads == (5,)
    assert cap.select(heads=np.array([5, 2])).heads == (5, 2)
    np.testing.assert_array_equal(cap.select(layers=4, heads=2).attention, cap.attention[1:, 1:2])
