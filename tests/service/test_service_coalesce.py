"""Coalesced Capture streams (CaptureRequest.coalesce): several items per message.

The same items as the plain stream, packed into messages of at most the chunk
bound; both forms decode to the arrays sent, bit for bit; old clients get the
plain stream; the client reads an old server's plain stream; a stream cut after
a coalesced message resumes from the first example it did not complete; a
hostile coalesced message is a WireError.
"""

from __future__ import annotations

import threading
import types
from concurrent import futures

import grpc
import numpy as np
import pytest
from local_server import fake_service
from service_support import SENTENCES, TEXTS, WHAT
from test_service_wire import make_capture, same

from jaxattn.capture import Capture
from jaxattn.client import AttentionClient
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import (
    StreamDecoder,
    WireError,
    coalesce,
    protowire,
    receive,
    send,
    serialize_coalesced,
    serialize_example,
)
from service.admission import STREAM_CHUNKS, reservation
from service.micro_batching import MicroBatcher
from service.servicer import _serialized


def mixed() -> list[Capture]:
    """Examples of every dtype, short and long, single and pairs, one strided tensor."""
    caps = [
        make_capture(t, dtype, seed=t, pair=t % 2 == 0)
        for t, dtype in ((2, "float32"), (9, "uint8"), (40, "float16"), (3, "bfloat16"))
    ]
    big = np.random.default_rng(5).random((4, 3, 130, 130)).astype(np.float32)
    strided = make_capture(130, "float32", seed=7)
    strided.tensors["attention"] = big[1:3]  # a view into a batch, as the engine gives
    return [*caps, strided, make_capture(5, "float32", seed=5, pair=True)]


def items_of(messages) -> list[pb.CaptureResponse]:
    out = []
    for m in messages:
        parsed = pb.CaptureResponse.FromString(m)
        out += list(parsed.items) if parsed.items else [parsed]
    return out


def plain_of(caps, codec, bound) -> list[bytes]:
    return [
        m
        for i, c in enumerate(caps)
        for m in serialize_example(i, c, codec=codec, max_chunk_bytes=bound)
    ]


def data_offsets(message: bytes) -> list[int]:
    """Where each chunk's data starts in the message (received bytes, split in place)."""
    base = np.frombuffer(message, np.uint8).__array_interface__["data"][0]
    return [
        np.frombuffer(data, np.uint8).__array_interface__["data"][0] - base
        for kind, _, data in protowire.split_items(message)
        if kind == "chunk" and len(data)
    ]


@pytest.mark.parametrize("codec", ["none", "zstd", "lz4"])
@pytest.mark.parametrize("bound", [1024, 70_000, 4177920])
def test_coalesced_and_plain_streams_carry_the_same_items_and_arrays(codec, bound):
    caps = mixed()
    plain = plain_of(caps, codec, bound)
    packed = list(
        serialize_coalesced(enumerate(caps), codec=codec, max_chunk_bytes=bound, ready=lambda: True)
    )
    assert len(packed) < len(plain)
    # The same items in the same order (padding aside: it depends on the position).
    got, want = items_of(packed), [pb.CaptureResponse.FromString(m) for m in plain]
    for item in got + want:
        item.chunk.ClearField("padding")
    assert got == want
    for form in (packed, plain):  # bytes in place, and parsed by stock protobuf
        for feed in (
            lambda d, m: d.feed_all(m),
            lambda d, m: d.feed_all(pb.CaptureResponse.FromString(m)),
        ):
            decoder = StreamDecoder()
            back = [c for m in form for c in feed(decoder, m)]
            decoder.finish()
            assert len(back) == len(caps)
            assert all(same(b, c) for b, c in zip(back, caps, strict=True))
    # No message larger than the plain stream's largest; several items only within the bound.
    assert max(map(len, packed)) <= max(bound, max(map(len, plain)))
    for m in packed:
        if m[0] == protowire.ITEMS_TAG:
            assert len(m) <= bound and len(pb.CaptureResponse.FromString(m).items) > 1
            # Every chunk's data 16-aligned in the message (a lone small or compressed
            # chunk is framed as the plain stream frames it: unpadded).
            assert all(offset % protowire.DATA_ALIGNMENT == 0 for offset in data_offsets(m))


def test_a_tensor_over_the_bound_is_split_and_examples_share_messages():
    caps = mixed()
    packed = list(
        serialize_coalesced(
            enumerate(caps), codec="none", max_chunk_bytes=70_000, ready=lambda: True
        )
    )
    parsed = [pb.CaptureResponse.FromString(m) for m in packed]
    att = [
        i.chunk
        for i in items_of(packed)
        if i.chunk.tensor == "attention" and i.chunk.example_index == 4
    ]
    assert len(att) == 2 * 3 * 130 * 130 * 4 // 70_000 + 1  # split at the bound
    assert any(sum(i.HasField("header") for i in p.items) > 1 for p in parsed)  # examples share
    # A one-chunk float32 tensor read from a coalesced message is a view of it (no copy).
    decoder = StreamDecoder()
    back = [c for m in packed for c in decoder.feed_all(m)]
    assert not back[0].tensors["attention"].flags.owndata


def test_nothing_is_held_back_for_an_example_not_ready():
    caps = mixed()
    packed = list(serialize_coalesced(enumerate(caps), codec="zstd", max_chunk_bytes=1 << 20))
    for m in packed:  # ready() False: each message ends with its example or before
        indices = {
            i.header.index if i.HasField("header") else i.chunk.example_index for i in items_of([m])
        }
        assert len(indices) == 1
    assert len(packed) == len(caps)  # each small example in one message


def test_a_zero_crc_of_data_written_in_place_keeps_the_message_valid(monkeypatch):
    """A zero CRC-32 is a field protobuf leaves out: the head shrinks by 5 bytes and its
    padding grows by as many, so the data stays where it was written."""
    for module in (coalesce, send, receive):
        monkeypatch.setattr(module, "checksum", lambda data: 0)
    cap = make_capture(140, "float32", seed=1)  # attention 470 KB: written in place
    packed = list(
        serialize_coalesced(
            [(0, cap), (1, cap)], codec="none", max_chunk_bytes=1 << 20, ready=lambda: True
        )
    )
    assert any(len(pb.CaptureResponse.FromString(m).items) > 1 for m in packed)
    decoder = StreamDecoder()
    back = [c for m in packed for c in decoder.feed_all(m)]
    assert [same(b, cap) for b in back] == [True, True]
    assert all(i.chunk.crc32 == 0 for i in items_of(packed) if i.HasField("chunk"))


def test_hostile_coalesced_messages_are_wire_errors():
    header = pb.ExampleHeader(
        index=0, tokens=["a"], layers=[0], heads=[0], tensors=["attention"], chunk_count=1
    )
    nested = pb.CaptureResponse(
        items=[pb.CaptureResponse(items=[pb.CaptureResponse(header=header)])]
    )
    both = pb.CaptureResponse(header=header, items=[pb.CaptureResponse(header=header)])
    empty_item = pb.CaptureResponse(items=[pb.CaptureResponse()])
    for message, says in ((nested, "inside an item"), (both, "both"), (empty_item, "neither")):
        for form in (message, message.SerializeToString()):
            with pytest.raises(WireError, match=says):
                StreamDecoder().feed_all(form)
    two = list(
        serialize_coalesced(
            enumerate(mixed()[:2]), codec="none", max_chunk_bytes=1 << 20, ready=lambda: True
        )
    )
    assert len(two) == 1
    with pytest.raises(WireError, match="feed_all"):
        StreamDecoder().feed_bytes(two[0])


def test_a_coalesced_stream_reserves_messages_of_several_small_examples():
    """Admission reserves the messages a stream may hold: a plain one's hold one
    example's bytes at most; a coalesced one's, up to the chunk bound of several."""

    class Sized:
        def output_bytes(self, spec, length):
            return 1000 * length

    tokenized = [types.SimpleNamespace(length=n) for n in (3, 5, 2)]
    args = dict(buffer_bytes=1 << 20, chunk_bytes=4096)
    sizes, plain = reservation(Sized(), None, tokenized, **args)
    _, packed = reservation(Sized(), None, tokenized, coalesce=True, **args)
    assert sizes == [3000, 5000, 2000]
    assert plain == 10_000 + STREAM_CHUNKS * 4096  # min(4096, largest 5000)
    assert packed == 10_000 + STREAM_CHUNKS * 4096  # min(4096, all 10,000)
    args["chunk_bytes"] = 8192
    assert reservation(Sized(), None, tokenized, **args)[1] == 10_000 + STREAM_CHUNKS * 5000
    assert (
        reservation(Sized(), None, tokenized, coalesce=True, **args)[1]
        == 10_000 + STREAM_CHUNKS * 8192
    )


@pytest.mark.parametrize(("head_len", "data_len"), [(55, 2097076), (37, 2097108), (40, 100_000)])
def test_framing_at_a_varint_boundary_is_valid_and_aligned(head_len, data_len):
    """A chunk whose length lands at 2^21 (a varint's 3-to-4-byte step) once padded: the
    padding search finds an aligned layout, and the prefixes always match the padding
    they go with (before, the plain frame raised ValueError on these)."""
    meta = pb.TensorChunk(tensor="t" * (head_len - 2))
    head = meta.SerializeToString()
    assert len(head) == head_len
    data = np.arange(data_len, dtype=np.uint32).astype(np.uint8)
    message, head_region, region = protowire.chunk_frame(head, data_len)
    region[:] = data
    framed, regions = protowire.frame_items([(b"", None), (head, data_len), (head, 1000)])
    for _, (_, r) in zip((1, 2), regions[1:], strict=True):
        r[:] = data[: len(r)]
    for m in (message, framed):
        chunks = [i.chunk for i in items_of([m]) if i.HasField("chunk")]
        assert chunks[0].tensor == meta.tensor and chunks[0].data == data.tobytes()
        assert all(offset % protowire.DATA_ALIGNMENT == 0 for offset in data_offsets(m))


@pytest.mark.parametrize("bits", [7, 14, 21])
def test_framing_around_each_varint_step_parses_and_aligns(bits):
    """Every data length near a varint's step (2^7, 2^14, 2^21), after items of every
    length mod 16 and for a plain chunk: protobuf reads the chunk back, its data starts
    16-aligned, and the padding between is zero bytes of at most 2 * 16 + 1."""
    head = pb.TensorChunk(tensor="t", byte_length=5).SerializeToString()
    for data_len in range((1 << bits) - 40, (1 << bits) + 8):
        messages = [protowire.chunk_frame(head, data_len)[0]]
        for shift in range(16):  # a header item of 2 + shift bytes before the chunk
            header = pb.ExampleHeader(tokens=["x" * shift]).SerializeToString()
            messages.append(protowire.frame_items([(header, None), (head, data_len)])[0])
        for m in messages:
            chunk = items_of([m])[-1].chunk
            assert (chunk.tensor, chunk.byte_length, len(chunk.data)) == ("t", 5, data_len)
            assert not chunk.padding.strip(b"\0") and len(chunk.padding) <= 2 * 16 + 1 - 2
            assert data_offsets(m) and all(
                o % protowire.DATA_ALIGNMENT == 0 for o in data_offsets(m)
            )


def test_rewrite_head_refuses_a_head_that_does_not_fit():
    region = np.zeros(10, np.uint8)
    protowire.rewrite_head(region, b"\x08\x01" * 4)  # 2 bytes left: an empty padding field
    assert bytes(region[8:]) == b"\x6a\x00"
    for head in (b"\x08\x01" * 6, b"\x08" * 9):
        with pytest.raises(RuntimeError, match="does not fit"):
            protowire.rewrite_head(region, head)


class GatedPieces:
    """An engine whose examples hold `length` kB of attention; its third run (piece)
    waits for `gate`."""

    def __init__(self):
        self.gate, self.runs = threading.Event(), 0

    def output_bytes(self, spec, length):
        return length * 1000

    def run(self, tokenized, spec):
        self.runs += 1
        if self.runs == 3:
            assert self.gate.wait(30), "gate never opened"
        for pos, e in enumerate(tokenized):
            side = int(np.sqrt(e.length * 1000 / 24))  # 2 x 3 x side x side float32
            yield pos, make_capture(side, "float32", seed=pos)


def test_a_coalescing_sender_sends_what_it_holds_rather_than_wait_for_the_next_example():
    """Piece 3 held at a gate: the first message goes out with the examples at hand,
    never waiting for piece 3 (a hang here would fail at the 30 s bound)."""
    engine = GatedPieces()
    batcher = MicroBatcher(
        engine, queue_size=2, window_s=0.0, max_batch_examples=4, buffer_bytes=40_000
    )
    batcher.start()
    try:
        job = batcher.submit("spec", [types.SimpleNamespace(length=2)] * 12, coalesce=True)
        parsed = types.SimpleNamespace(codec="none", max_chunk_bytes=1 << 20, coalesce=True)
        messages = _serialized(job, parsed)
        with futures.ThreadPoolExecutor(1) as pool:
            first = pool.submit(next, messages).result(timeout=30)  # no wait for piece 3
        decoder = StreamDecoder()
        done = decoder.feed_all(first)
        # Whole examples, of pieces 1 and 2 only (as many as the batcher had put when
        # the sender asked: it packs on only into an example already there).
        assert 1 <= len(done) <= 8 and decoder.header is None
        assert engine.runs <= 3 and not engine.gate.is_set()
        engine.gate.set()
        done += [c for m in messages for c in decoder.feed_all(m)]
        decoder.finish()
    finally:
        batcher.close()
    assert len(done) == 12
    assert all(same(c, make_capture(9, "float32", seed=k % 4)) for k, c in enumerate(done))


# -- through a server ---------------------------------------------------------------------------


@pytest.mark.parametrize(("codec", "bound"), [("none", None), ("zstd", 1024), ("lz4", 2048)])
def test_a_server_sends_both_forms_alike(address, svc_engine, codec, bound):
    """Against the engine's own arrays (the spec most service tests share: no new
    compile; the dtypes are the wire tests' above, on the same send path)."""
    want = svc_engine.capture(TEXTS, what=WHAT)
    for asks in (True, False):
        with AttentionClient(address, timeout=60, coalesce=asks) as client:
            got = client.capture(TEXTS, what=WHAT, codec=codec, max_chunk_bytes=bound)
        assert len(got) == len(want)
        assert all(same(g, w) for g, w in zip(got, want, strict=True))


def raw_call(address: str, request: pb.CaptureRequest) -> list[bytes]:
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_stream(
            "/jaxattn.v1.AttentionService/Capture",
            request_serializer=None,
            response_deserializer=None,
        )
        return list(call(request.SerializeToString(), timeout=60))


def test_an_old_client_gets_one_item_per_message_and_a_new_one_fewer(address):
    request = pb.CaptureRequest(texts=[pb.Text(text=t) for t in SENTENCES[:4]], what=WHAT)
    plain = raw_call(address, request)  # what a client that predates the field sends
    assert all(m[0] in (protowire.HEADER_TAG, protowire.CHUNK_TAG) for m in plain)
    assert all(len(protowire.split_items(m) or ()) == 1 for m in plain)  # one item each
    request.coalesce = True
    packed = raw_call(address, request)
    assert len(packed) < len(plain)
    assert [i.SerializeToString() for i in items_of(packed) if i.HasField("header")] == [
        i.SerializeToString() for i in items_of(plain) if i.HasField("header")
    ]
    with AttentionClient(address, timeout=60) as client:
        assert client.server_info().coalesce


# -- against scripted servers ----------------------------------------------------------------


class Scripted:
    """A fake AttentionService sending `answers[k]` (messages, then a status code or None)
    to Capture call k, and recording each call's request."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests: list[pb.CaptureRequest] = []
        self.lock = threading.Lock()

    def capture(self, request, context):
        with self.lock:
            self.requests.append(request)
            messages, code = self.answers[len(self.requests) - 1]
        yield from messages
        if code is not None:
            context.abort(code, "scripted cut")

    def info(self, request, context):
        return pb.ModelInfo(name="fake", layers=3, heads=3, weights="blake2b:fake")


def scripted(script: Scripted):
    return fake_service(script.capture, script.info)


def test_the_client_reads_an_old_servers_plain_stream():
    caps = mixed()[:3]
    script = Scripted([(plain_of(caps, "none", 4177920), None)])
    with scripted(script) as address, AttentionClient(address, timeout=30) as client:
        got = client.capture(["a", "b", "c"])
    assert script.requests[0].coalesce  # asked, and was answered in the plain form
    assert all(same(g, c) for g, c in zip(got, caps, strict=True)) and len(got) == 3


def test_a_stream_cut_after_a_coalesced_message_resumes_from_the_first_example_not_completed():
    """The first message completes example 0 and starts example 1; the cut comes next.
    The client hands over example 0 once and asks the rest (from 1) again."""
    caps = [make_capture(t, "float32", seed=t) for t in (3, 4, 5)]
    cut = list(
        serialize_coalesced(
            enumerate(caps[:2]), codec="none", max_chunk_bytes=1 << 20, ready=lambda: True
        )
    )
    assert len(cut) == 1
    first = pb.CaptureResponse.FromString(cut[0])
    starts = [k for k, i in enumerate(first.items) if i.HasField("header")]
    half = pb.CaptureResponse(items=first.items[: starts[1] + 1])  # example 0, example 1's header
    rest = list(
        serialize_coalesced(
            enumerate(caps[1:]), codec="none", max_chunk_bytes=1 << 20, ready=lambda: True
        )
    )
    script = Scripted([([half.SerializeToString()], grpc.StatusCode.UNAVAILABLE), (rest, None)])
    with (
        scripted(script) as address,
        AttentionClient(address, timeout=30, backoff=(0.01, 0.02)) as client,
    ):
        got = client.capture(["a", "b", "c"])
    assert [[t.text for t in r.texts] for r in script.requests] == [["a", "b", "c"], ["b", "c"]]
    assert all(r.coalesce for r in script.requests)
    assert [g.text for g in got] == ["a", "b", "c"]
    assert all(same(g, c) for g, c in zip(got, caps, strict=True))
