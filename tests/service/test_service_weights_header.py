"""The weights fingerprint in the stream's first ExampleHeader (CaptureRequest.weights_in_header).

A request that sets the field gets the answering model's fingerprint in its
stream's first header and no `jaxattn-weights` initial metadata; one without it
(an old client) gets the metadata, as before. The client asks by default and
reads the header, or the metadata from a server that ignores the field; a
resumed stream's fingerprint, from either place, is checked against the first
part's. Against the engine's own fingerprint and GetModelInfo's.
"""

from __future__ import annotations

import contextlib
import threading

import grpc
import pytest
from local_server import fake_service
from service_support import SENTENCES, WHAT, running_server
from test_service_wire import make_capture

from jaxattn.client import AttentionClient, AttentionServiceError
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import serialize_coalesced, serialize_example
from jaxattn.wire.codecs import WEIGHTS_METADATA
from jaxattn.wire.receive import stream_weights


@pytest.fixture(autouse=True)
def first_address_first(monkeypatch):
    """Every client's first call goes to its first address (a client starts at a random
    one, `channels.first_turn`): these tests name which replica answers which call."""
    from jaxattn.client import channels

    monkeypatch.setattr(channels, "first_turn", lambda n: 0)


CAPTURE = "/jaxattn.v1.AttentionService/Capture"
INFO = "/jaxattn.v1.AttentionService/GetModelInfo"


def raw_call(address: str, request: pb.CaptureRequest) -> tuple[dict, list[bytes]]:
    """(initial metadata, messages) of a Capture call sent as a raw stub call."""
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_stream(CAPTURE, request_serializer=None, response_deserializer=None)
        responses = call(request.SerializeToString(), timeout=60)
        messages = list(responses)
        return dict(responses.initial_metadata() or ()), messages


def headers_of(messages: list[bytes]) -> list[pb.ExampleHeader]:
    items = []
    for m in messages:
        parsed = pb.CaptureResponse.FromString(m)
        items += list(parsed.items) if parsed.items else [parsed]
    return [i.header for i in items if i.HasField("header")]


def fingerprint(address: str) -> str:
    with grpc.insecure_channel(address) as channel:
        info = channel.unary_unary(
            INFO,
            request_serializer=pb.GetModelInfoRequest.SerializeToString,
            response_deserializer=pb.ModelInfo.FromString,
        )(pb.GetModelInfoRequest(), timeout=60)
    return info.weights


def request(texts, **fields) -> pb.CaptureRequest:
    return pb.CaptureRequest(texts=[pb.Text(text=t) for t in texts], what=WHAT, **fields)


@pytest.mark.parametrize("coalesce", [False, True])
def test_asked_the_first_header_names_the_weights_and_no_metadata_is_sent(
    address, svc_engine, coalesce
):
    metadata, messages = raw_call(
        address, request(SENTENCES[:4], weights_in_header=True, coalesce=coalesce)
    )
    weights = svc_engine.weights_fingerprint
    assert weights.startswith("blake2b:") and fingerprint(address) == weights
    assert WEIGHTS_METADATA not in metadata
    assert [h.weights for h in headers_of(messages)] == [weights, "", "", ""]
    assert stream_weights(messages[0]) == weights
    if coalesce:  # several items to a message: the first one is the header
        assert len(pb.CaptureResponse.FromString(messages[0]).items) > 1


@pytest.mark.parametrize("coalesce", [False, True])
def test_a_first_example_sent_in_layer_groups_names_the_weights_in_its_header(svc_engine, coalesce):
    """An example over max_example_bytes is sent a layer group at a time, the header
    with its first group (tests/service/test_service_layer_groups.py): that header is
    the stream's first and names the weights."""
    long = "the cat sat on the mat " * 6  # 38 tokens: padded to 67, over the limit whole
    spec = svc_engine.make_spec(what=["attention"])
    assert svc_engine.output_bytes(spec, 67) > 100_000 > svc_engine.part_bytes(spec, 67, 100_000)
    options = dict(max_example_bytes=100_000, request_buffer_bytes=30_000)
    with running_server(svc_engine, **options) as (_, address):
        asked = pb.CaptureRequest(
            texts=[pb.Text(text=t) for t in (long, SENTENCES[0])],
            what=["attention"],
            weights_in_header=True,
            coalesce=coalesce,
        )
        metadata, messages = raw_call(address, asked)
    assert WEIGHTS_METADATA not in metadata
    weights = svc_engine.weights_fingerprint
    assert [h.weights for h in headers_of(messages)] == [weights, ""]


@pytest.mark.parametrize("coalesce", [False, True])
def test_an_old_client_gets_the_metadata_and_no_fingerprint_in_a_header(
    address, svc_engine, coalesce
):
    """A raw call without the field: what a client that predates it sends."""
    metadata, messages = raw_call(address, request(SENTENCES[:3], coalesce=coalesce))
    assert metadata[WEIGHTS_METADATA] == svc_engine.weights_fingerprint
    assert [h.weights for h in headers_of(messages)] == ["", "", ""]
    assert stream_weights(messages[0]) == ""


@contextlib.contextmanager
def proxy(address: str, old: bool, info_weights: str):
    """A stand-in server in front of the real one at `address`: forwards Capture calls
    and their initial metadata, after dropping weights_in_header where `old` (a server
    that predates the field never sees it); its GetModelInfo names `info_weights`, as
    a balancer's other replica may. Yields (its address, the requests it received)."""
    received, lock = [], threading.Lock()
    channel = grpc.insecure_channel(address)
    forward = channel.unary_stream(CAPTURE, request_serializer=None, response_deserializer=None)

    def capture(req, context):
        with lock:
            received.append(pb.CaptureRequest.FromString(req.SerializeToString()))
        if old:
            req.ClearField("weights_in_header")
        call = forward(req.SerializeToString(), timeout=60)
        metadata = call.initial_metadata()
        if metadata:
            context.send_initial_metadata(metadata)
        yield from call

    def info(req, context):
        return pb.ModelInfo(name="elsewhere", layers=3, heads=3, weights=info_weights)

    try:
        with fake_service(capture, info) as here:
            yield here, received
    finally:
        channel.close()


@pytest.mark.parametrize("coalesce", [True, False])
@pytest.mark.parametrize("old", [False, True], ids=["new server", "old server"])
def test_the_client_reads_the_fingerprint_from_the_header_or_an_old_servers_metadata(
    address, svc_engine, old, coalesce
):
    """The client's GetModelInfo reaches another replica (other weights) than its
    Capture call: the weights the call names win, from the header or the metadata."""
    weights = svc_engine.weights_fingerprint
    with (
        proxy(address, old, info_weights="blake2b:elsewhere") as (here, received),
        AttentionClient(here, timeout=60, coalesce=coalesce) as client,
    ):
        got = client.capture(list(SENTENCES[:3]), what=WHAT)
    assert [c.provenance["weights"] for c in got] == [weights] * 3
    assert [r.weights_in_header for r in received] == [True]  # asked by default


class Replica:
    """A scripted replica: its GetModelInfo says `says`; its Capture calls name `names`
    in the stream's first header or in the initial metadata (`where`), and the first
    of them is cut (UNAVAILABLE) after `cut` examples (None: never)."""

    def __init__(self, says: str, names: str, where: str = "header", cut: int | None = None):
        self.says, self.names, self.where, self.cut = says, names, where, cut
        self.texts: list[list[str]] = []

    def capture(self, req, context):
        self.texts.append([t.text for t in req.texts])
        if self.where == "metadata":
            context.send_initial_metadata(((WEIGHTS_METADATA, self.names),))
        in_header = self.names if self.where == "header" else ""
        caps = enumerate(make_capture(3 + k, "float32", seed=k) for k in range(len(req.texts)))
        cut, self.cut = self.cut, None
        for k, cap in caps:
            if cut is not None and k == cut:
                context.abort(grpc.StatusCode.UNAVAILABLE, "scripted cut")
            yield from serialize_example(
                k, cap, codec="none", max_chunk_bytes=1 << 20, weights="" if k else in_header
            )

    def info(self, req, context):
        return pb.ModelInfo(name="fake", layers=3, heads=3, weights=self.says)


@pytest.mark.parametrize("where", ["header", "metadata"])
@pytest.mark.parametrize("same", [True, False], ids=["same weights", "other weights"])
def test_a_resumed_stream_is_checked_by_the_weights_its_own_call_names(where, same):
    """Cut after one example; the replica asked for the rest says the first's weights in
    its GetModelInfo, but its call names its own: other weights are refused."""
    first = Replica("blake2b:a", "blake2b:a", cut=1)
    rest = Replica("blake2b:a", "blake2b:a" if same else "blake2b:b", where=where)
    with (
        fake_service(first.capture, first.info) as one,
        fake_service(rest.capture, rest.info) as two,
        AttentionClient([one, two], timeout=30, backoff=(0.01, 0.02)) as client,
    ):
        got, error = [], None
        try:
            for cap in client.stream(["x", "y", "z"]):
                got.append(cap)
        except AttentionServiceError as e:
            error = e
    assert first.texts == [["x", "y", "z"]] and rest.texts == [["y", "z"]]
    if same:
        assert error is None and [c.text for c in got] == ["x", "y", "z"]
        assert {c.provenance["weights"] for c in got} == {"blake2b:a"}
    else:
        assert [c.text for c in got] == ["x"]
        assert error is not None and error.code == grpc.StatusCode.FAILED_PRECONDITION
        assert "blake2b:a" in error.message and "blake2b:b" in error.message


def test_a_coalesced_stream_names_the_weights_in_its_first_header_only():
    caps = [make_capture(t, "float32", seed=t) for t in (3, 4, 5)]
    messages = list(
        serialize_coalesced(
            enumerate(caps),
            codec="none",
            max_chunk_bytes=1 << 20,
            ready=lambda: True,
            weights="blake2b:w",
        )
    )
    assert len(messages) == 1  # all three examples in one message
    assert [h.weights for h in headers_of(messages)] == ["blake2b:w", "", ""]
    assert stream_weights(messages[0]) == "blake2b:w"
    assert stream_weights(pb.CaptureResponse.FromString(messages[0])) == "blake2b:w"
    # Framed otherwise than the server frames it (protobuf's own serialisation of a
    # message with an unknown field beside the header): read by protobuf, the same.
    odd = pb.CaptureResponse.FromString(messages[0]).items[0].SerializeToString() + bytes(
        (0x78, 1)  # field 15, varint 1: unknown to this version
    )
    assert stream_weights(odd) == "blake2b:w"
    assert stream_weights(b"\xff\xff") == ""  # not a message: the decoder's to refuse
