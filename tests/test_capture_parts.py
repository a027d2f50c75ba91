"""`CapturePart` (jaxattn/capture/part.py): an example's layer groups, assembled on the host
and sent on the wire group by group (each group a contiguous byte range of every tensor:
hidden_states' embeddings entry with group 0), decode to the Capture sent whole, bit for
bit, on plain and coalesced streams, in place and compressed, with chunks that cut a
group's range and interleave tensors. Numpy only: synthetic captures."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from capture_samples import cut

from jaxattn.capture import Capture
from jaxattn.capture.part import Assembler, assemble, ends_example
from jaxattn.errors import UsageError
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import StreamDecoder, chunk_example, serialize_coalesced, serialize_example

T = 131  # a layer's float32 map of 2 heads: 137,288 bytes, past the 64 KiB in-place bound


def whole(seed: int, dtype: str = "float32") -> Capture:
    rng = np.random.default_rng(seed)
    att = rng.random((5, 2, T, T)).astype(np.float32)
    hid = rng.normal(size=(6, T, 7)).astype(np.float32)
    tensors = {"attention": att, "hidden_states": hid}
    quant = {}
    if dtype in ("float16", "bfloat16"):
        from jaxattn.dtypes import OUTPUT_DTYPES

        tensors = {n: t.astype(OUTPUT_DTYPES[dtype]) for n, t in tensors.items()}
    if dtype == "uint8":
        tensors = {"attention": np.round(att * 255).astype(np.uint8)}
        quant = {"attention": (1 / 255, 0.0)}
    return Capture(
        tokens=tuple(f"w{i}" for i in range(T)),
        sentence_b_start=None,
        layers=(0, 1, 3, 4, 6),
        heads=(0, 2),
        dtype=dtype,
        tensors=tensors,
        quantization=quant,
        query_positions=None,
    )


def same(got: Capture, want: Capture) -> None:
    assert got.tokens == want.tokens and got.layers == want.layers and got.heads == want.heads
    assert got.quantization == want.quantization and got.dtype == want.dtype
    assert got.tensors.keys() == want.tensors.keys()
    for name, t in want.tensors.items():
        assert got.tensors[name].dtype == t.dtype and got.tensors[name].shape == t.shape
        np.testing.assert_array_equal(got.tensors[name], t, err_msg=name)


def test_a_parts_entries_and_byte_ranges():
    parts = cut(whole(0), (0, 2, 3, 5))
    assert [p.entries("attention") for p in parts] == [(0, 2), (2, 3), (3, 5)]
    assert [p.entries("hidden_states") for p in parts] == [(0, 3), (3, 4), (4, 6)]
    row = 2 * T * T * 4
    assert [p.byte_range("attention") for p in parts] == [
        (0, 2 * row),
        (2 * row, 3 * row),
        (3 * row, 5 * row),
    ]
    assert parts[1].shape("hidden_states") == (6, T, 7)
    assert [(p.first, p.last, p.parts) for p in parts] == [
        (True, False, 3),
        (False, False, 3),
        (False, True, 3),
    ]


def test_which_items_end_their_example_is_a_type_check(monkeypatch):
    """A Capture ends its example, and of parts only the last does; asked without
    touching a Capture's attributes (its unknown-attribute error, with suggestions,
    cost the server ~60 us an example when this was getattr(cap, "last", True))."""
    cap = whole(0)
    parts = cut(cap, (0, 2, 4, 5))
    assert [ends_example(p) for p in parts] == [False, False, True]

    def no_lookup(self, name):
        raise AssertionError(f"looked up Capture.{name}")

    monkeypatch.setattr(Capture, "__getattr__", no_lookup, raising=False)
    assert ends_example(cap)


def test_parts_assemble_to_the_whole_capture():
    cap = whole(1)
    same(assemble(cut(cap, (0, 2, 3, 5))), cap)
    assembler = Assembler()  # two examples' parts interleaved
    other = whole(2)
    a, b = cut(cap, (0, 4, 5)), cut(other, (0, 1, 5))
    assert assembler.add("a", a[0]) is None and assembler.add("b", b[0]) is None
    same(assembler.add("b", b[1]), other)
    got = assembler.add("a", a[1])
    same(got, cap)
    assert not got.tensors["attention"].flags.writeable


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "uint8"])
def test_large_parts_are_copied_on_several_threads_bit_for_bit(copy_threads, dtype):
    """Parts past the copy pool's bound (made a few KiB) assembled by its threads, the
    whole Capture's bytes those of the capture cut, NaN payloads and all."""
    cap = whole(3, dtype)
    rng = np.random.default_rng(4)
    tensors = {
        n: rng.integers(0, 256, t.nbytes, dtype=np.uint8).view(t.dtype).reshape(t.shape)
        for n, t in cap.tensors.items()
    }
    cap = dataclasses.replace(cap, tensors=tensors)
    got = assemble(cut(cap, (0, 1, 4, 5)))
    assert any(t.startswith("jaxattn-copy") for t in copy_threads)
    for name, t in cap.tensors.items():
        assert got.tensors[name].tobytes() == t.tobytes(), name
        assert not got.tensors[name].flags.writeable


def test_assemble_names_what_is_not_one_example_s_parts():
    parts = cut(whole(1), (0, 2, 5))
    with pytest.raises(UsageError, match="no part ends the example"):
        assemble([])  # was None, silently
    with pytest.raises(UsageError, match="no part ends the example"):
        assemble(parts[:1])
    with pytest.raises(UsageError, match=r"parts\[0\] is a tuple, not a CapturePart .*pairs"):
        assemble([(0, p) for p in parts])  # capture_layers' pairs: an AttributeError


@pytest.mark.parametrize(
    "codec, dtype",
    [
        ("none", "float32"),
        ("zstd", "float32"),
        ("none", "uint8"),
        ("zstd", "uint8"),
        ("lz4", "uint8"),
        ("lz4", "float16"),
        ("none", "bfloat16"),
    ],
)
def test_parts_on_the_wire_decode_to_the_capture_sent_whole(codec, dtype):
    caps = [whole(3, dtype), whole(4, dtype)]
    items = [(0, p) for p in cut(caps[0], (0, 2, 3, 5))] + [(1, caps[1])]
    streams = {
        "plain": [
            m
            for i, c in items
            for m in serialize_example(i, c, codec=codec, max_chunk_bytes=50_000)
        ],
        "coalesced": list(serialize_coalesced(items, codec=codec, max_chunk_bytes=50_000)),
        "parsed": [
            m.SerializeToString()
            for i, c in items
            for m in chunk_example(i, c, codec=codec, max_chunk_bytes=50_000)
        ],
    }
    for kind, messages in streams.items():
        decoder, got = StreamDecoder(), []
        for m in messages:
            got += decoder.feed_all(m)
        decoder.finish()
        assert len(got) == 2, kind
        for g, w in zip(got, caps, strict=True):
            same(g, w)
    # one header per example, announcing every part's chunks
    parsed = [pb.CaptureResponse.FromString(m) for m in streams["plain"]]
    assert sum(m.HasField("header") for m in parsed) == 2


def test_a_stream_cut_between_an_examples_groups_gives_nothing_of_it():
    # What the client's resume relies on (jaxattn/client/client.py: a fresh decoder per
    # attempt, resumed from the first example not received): a stream cut after some of
    # an example's groups yields the examples before it and none of that one, and fails
    # at its end rather than hand over a Capture assembled from half of it.
    from jaxattn.wire import WireError

    caps = [whole(5), whole(6)]
    items = [(0, caps[0])] + [(1, p) for p in cut(caps[1], (0, 2, 3, 5))]
    parts = [
        m
        for i, c in items[:3]
        for m in serialize_example(i, c, codec="none", max_chunk_bytes=50_000)
    ]
    decoder, got = StreamDecoder(), []
    for m in parts:  # example 0 whole, then two of example 1's three groups
        got += decoder.feed_all(m)
    assert len(got) == 1
    same(got[0], caps[0])
    with pytest.raises(WireError):
        decoder.finish()
    resumed = [(0, p) for p in cut(caps[1], (0, 2, 3, 5))]  # texts[1:]: example 1 again
    decoder, got = StreamDecoder(), []
    for i, c in resumed:
        for m in serialize_example(i, c, codec="none", max_chunk_bytes=50_000):
            got += decoder.feed_all(m)
    decoder.finish()
    assert len(got) == 1
    same(got[0], caps[1])
