"""A capture that loads, from a file (`Capture.load`) or from a server's chunks
(`StreamDecoder`), has tensors of the shapes its tokens, layers, heads, key/value heads
and query/key positions give (`jaxattn.capture.shapes`); a mismatch is the path's error
(CaptureFileError, WireError) naming the tensor, the shape expected and the one found.

The expected shapes below are written out by hand for one capture: T = 5 tokens,
layers (1, 4): L = 2, heads (0, 2, 5): H = 3, grouped-query kv_heads (0, 0, 1): G = 2,
head dim K = 4, model dim D = 6, the maps' query rows (1, 3): R = 2, and keys
(0, 2, 4): S' = 3.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from jaxattn import Capture
from jaxattn.errors import CaptureFileError
from jaxattn.wire import StreamDecoder, WireError, chunk_example

SHAPES = {
    "attention": (2, 3, 2, 3),  # [L, H, R, S']
    "scores": (2, 3, 2, 3),
    "alpha_fx_norm": (2, 3, 2, 3),
    "sum_alpha_fx_norm": (2, 2, 3),  # [L, R, S']
    "queries": (2, 3, 5, 4),  # [L, H, T, K]
    "keys": (2, 2, 5, 4),  # [L, G, T, K]
    "values": (2, 2, 5, 4),
    "fx_norm": (2, 3, 5),  # [L, H, T]
    "mixing_ratio": (2, 5, 3),  # [L, T, M = 3 measures]
    "head_stats": (2, 3, 10),  # [L, H, N = 10 statistics]
    "decoder_head_stats": (2, 3, 5),  # [L, H, P = 5 statistics]
    "hidden_states": (3, 5, 6),  # [L + 1, T, D]
}


def good(dtype: str = "float32", **shapes) -> Capture:
    rng = np.random.default_rng(0)
    tensors = {n: rng.random(s).astype(np.float32) for n, s in {**SHAPES, **shapes}.items()}
    quant = {}
    if dtype == "uint8":
        tensors = {n: (a * 255).astype(np.uint8) for n, a in tensors.items()}
        quant = {n: (1 / 255, 0.0) for n in tensors}
    return Capture(
        tokens=("[CLS]", "a", "b", "c", "[SEP]"),
        sentence_b_start=None,
        layers=(1, 4),
        heads=(0, 2, 5),
        kv_heads=(0, 0, 1),
        dtype=dtype,
        tensors=tensors,
        quantization=quant,
        query_positions=(1, 3),
        key_positions=(0, 2, 4),
    )


# (what is wrong, the tensor, its bad shape, the expected shape as the error gives it)
BAD = [
    ("whole rows of a map", "attention", (2, 3, 5, 3), "[2, 3, 2, 3]"),
    ("a map missing an axis", "attention", (2, 3, 6), "[2, 3, 2, 3]"),
    ("keys over query heads", "keys", (2, 3, 5, 4), "[2, 2, 5, 4]"),
    ("a head dim of its own", "values", (2, 2, 5, 7), "[2, 2, 5, 4]"),
    ("hidden_states without the embeddings", "hidden_states", (2, 5, 6), "[3, 5, 6]"),
    ("8 head statistics", "head_stats", (2, 3, 8), "[2, 3, 10]"),
    ("a layer too many", "fx_norm", (3, 3, 5), "[2, 3, 5]"),
    ("keys of a layer-wise map", "sum_alpha_fx_norm", (2, 2, 5), "[2, 2, 3]"),
    ("a token short", "mixing_ratio", (2, 4, 3), "[2, 5, 3]"),
    ("an empty map", "attention", (2, 3, 0, 3), "[2, 3, 2, 3]"),
]


def _refusal(name: str, found, expected: str) -> str:
    return re.escape(f"tensor {name!r} has shape {list(found)}, expected {expected}")


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_a_whole_capture_loads_and_streams_as_it_was(tmp_path, dtype):
    cap = good(dtype)
    cap.save(tmp_path / "c.npz")
    back = Capture.load(tmp_path / "c.npz")
    decoder = StreamDecoder()
    (wired,) = [
        c
        for m in chunk_example(0, cap, codec="none", max_chunk_bytes=97)
        if (c := decoder.feed(m)) is not None
    ]
    for other in (back, wired):
        assert {n: a.shape for n, a in other.tensors.items()} == SHAPES
        for name, array in cap.tensors.items():
            np.testing.assert_array_equal(other.tensors[name], array)
        assert other.query_positions == (1, 3) and other.kv_heads == (0, 0, 1)


@pytest.mark.parametrize("why, name, shape, expected", BAD, ids=[b[0] for b in BAD])
def test_a_capture_file_of_a_wrong_shape_is_refused_naming_it(tmp_path, why, name, shape, expected):
    good(**{name: shape}).save(tmp_path / "c.npz")
    with pytest.raises(CaptureFileError, match=_refusal(name, shape, expected)) as info:
        Capture.load(tmp_path / "c.npz")
    assert "c.npz is a damaged jaxattn capture" in str(info.value)


@pytest.mark.parametrize("why, name, shape, expected", BAD, ids=[b[0] for b in BAD])
def test_a_stream_of_a_wrong_shape_is_refused_naming_it(why, name, shape, expected):
    messages = list(chunk_example(0, good(**{name: shape}), codec="none", max_chunk_bytes=64))
    decoder = StreamDecoder()
    with pytest.raises(WireError, match="example 0: " + _refusal(name, shape, expected)):
        for message in messages:
            assert decoder.feed(message) is None


def test_the_refusal_comes_before_the_tensor_arrives():
    """The tensor's first chunk is refused: no buffer for the rest is made."""
    messages = list(chunk_example(0, good(queries=(2, 3, 50, 4)), codec="none", max_chunk_bytes=64))
    first = next(i for i, m in enumerate(messages) if m.chunk.tensor == "queries")
    decoder = StreamDecoder()
    for message in messages[:first]:
        decoder.feed(message)
    with pytest.raises(WireError, match=r"'queries' has shape \[2, 3, 50, 4\]"):
        decoder.feed(messages[first])


@pytest.mark.parametrize(
    "fields, refusal",
    [
        (dict(kv_heads=(0, 1)), "kv_heads names 2 key/value heads for 3 heads"),
        (dict(query_positions=(3, 1)), r"query_positions \[3, 1\] are not ascending"),
        (dict(key_positions=(0, 2, 5)), r"key_positions \[0, 2, 5\] name a position past its 5"),
    ],
)
def test_fields_that_disagree_are_refused_on_both_paths(tmp_path, fields, refusal):
    bad = dataclasses.replace(good(), **fields)
    bad.save(tmp_path / "c.npz")
    with pytest.raises(CaptureFileError, match=refusal):
        Capture.load(tmp_path / "c.npz")
    decoder = StreamDecoder()
    with pytest.raises(WireError, match=refusal):
        for message in chunk_example(0, bad, codec="none", max_chunk_bytes=1 << 20):
            decoder.feed(message)


def test_a_file_whose_positions_are_not_numbers_is_refused(tmp_path):
    import json

    cap = good()
    cap.save(tmp_path / "c.npz")
    with np.load(tmp_path / "c.npz") as archive:
        arrays = dict(archive)
    meta = json.loads(str(arrays["__meta__"]))
    arrays["__meta__"] = np.array(json.dumps({**meta, "query_positions": "13"}))
    np.savez(tmp_path / "d.npz", **arrays)
    with pytest.raises(CaptureFileError, match="query_positions is 13, not null or a list"):
        Capture.load(tmp_path / "d.npz")


def test_a_uint8_file_without_a_tensors_scale_is_refused(tmp_path):
    cap = good("uint8")
    dataclasses.replace(cap, quantization={"attention": (1 / 255, 0.0)}).save(tmp_path / "c.npz")
    with pytest.raises(CaptureFileError, match="uint8 tensor 'scores' has no"):
        Capture.load(tmp_path / "c.npz")


def test_a_quantity_of_a_newer_jaxattn_is_kept_as_it_came(tmp_path):
    cap = good()
    newer = dataclasses.replace(
        cap, tensors={**cap.tensors, "future_quantity": np.ones((7, 1), np.float32)}
    )
    newer.save(tmp_path / "c.npz")
    assert Capture.load(tmp_path / "c.npz").tensors["future_quantity"].shape == (7, 1)


def _without_kv_heads(tmp_path, cap: Capture):
    """`cap` saved as a jaxattn before kv_heads wrote it (no such field), loaded."""
    import json

    cap.save(tmp_path / "c.npz")
    with np.load(tmp_path / "c.npz") as archive:
        arrays = dict(archive)
    meta = json.loads(str(arrays["__meta__"]))
    del meta["kv_heads"]
    arrays["__meta__"] = np.array(json.dumps(meta))
    np.savez(tmp_path / "old.npz", **arrays)
    return Capture.load(tmp_path / "old.npz")


def test_a_file_from_before_kv_heads_keeps_its_grouped_keys(tmp_path):
    """Such a file's keys and values hold G key/value heads it does not name: any G loads,
    as long as keys and values agree on it (Capture.select knows such captures)."""
    cap = dataclasses.replace(good(), kv_heads=())
    back = _without_kv_heads(tmp_path, cap)
    assert back.kv_heads == () and back.keys.shape == (2, 2, 5, 4)
    rng = np.random.default_rng(1)
    values = rng.random((2, 1, 5, 4)).astype(np.float32)  # G = 1 beside keys' 2
    bad = dataclasses.replace(cap, tensors={**cap.tensors, "values": values})
    with pytest.raises(CaptureFileError, match=r"'values' has shape \[2, 1, 5, 4\], expected"):
        _without_kv_heads(tmp_path, bad)
