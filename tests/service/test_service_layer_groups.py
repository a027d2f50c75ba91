"""An example over the per-example limit is served in layer groups (issue 31, "Outputs at
this size"): the engine runs it a group of layers at a time within max_example_bytes,
the server sends each group's byte ranges as it lands and holds about a group, not the
example, and the client reassembles the Capture the in-process engine gives (plain and
coalesced streams). The shared tiny engine (3 layers x 3 heads): attention of a text
padded to 67 is 161,604 bytes, 53,868 a layer; with a 100,000-byte limit it used to be
refused (tests/service/test_service_output_limits.py keeps a limit one layer exceeds).
Also: uint8/zstd coalesced and float16/lz4 plain streams, each example counted once in
the metrics and every reservation given back; a drain (SIGTERM) while the worker waits
between an example's groups finishes that stream and refuses new calls; and a refusal
of affine uint8 says why it does not run in groups; a stream cut between an example's
groups resumes on another replica with that example sent again whole. The batcher's side of a slow
reader, a cancel and a deadline between groups: test_service_layer_groups_flow.py."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from service_support import running_server

from jaxattn.client import AttentionClient
from jaxattn.engine.layer_groups import GroupPolicy

LONG = "the cat sat on the mat " * 6  # 38 tokens: padded to 67
SHORT = "the cat sat on the mat"
LIMIT = 100_000
BUFFER = 30_000  # a call's unsent results: less than LONG's 61,104 bytes (38 tokens)


@pytest.mark.parametrize("coalesce", [False, True])
def test_an_example_over_the_limit_streams_in_layer_groups(svc_engine, coalesce):
    what = ["attention", "hidden_states"]
    spec = svc_engine.make_spec(what=what)
    assert svc_engine.output_bytes(spec, 67) > LIMIT  # refused whole, before
    assert svc_engine.part_bytes(spec, 67, LIMIT) < LIMIT  # a layer group fits
    policy = svc_engine.pipeline.group_policy
    svc_engine.pipeline.group_policy = GroupPolicy(0)
    try:
        want = svc_engine.capture([SHORT, LONG, SHORT], what=what)  # one program each
    finally:
        svc_engine.pipeline.group_policy = policy
    options = dict(max_example_bytes=LIMIT, request_buffer_bytes=BUFFER)
    with running_server(svc_engine, **options) as (server, address):
        with AttentionClient(address, timeout=60.0, coalesce=coalesce) as client:
            assert client.server_info().longest_text_attention == 67  # a layer fits
            got = client.capture([SHORT, LONG, SHORT], what=what)
        stats = server.batcher.stats
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.tokens == w.tokens and g.layers == w.layers
        for name in what:
            assert g.tensors[name].shape == w.tensors[name].shape, name
            np.testing.assert_allclose(
                g.tensors[name], w.tensors[name], rtol=2e-5, atol=2e-6, err_msg=name
            )
    # the server held about a group of LONG at a time (a layer's maps and hidden
    # states, 17,328 + 2,280 bytes at 38 tokens), never its whole output
    whole = sum(t.nbytes for t in want[1].tensors.values())
    assert whole == 3 * 3 * 38 * 38 * 4 + 4 * 38 * 15 * 4 > BUFFER
    assert 0 < stats["peak_job_buffered_bytes"] <= BUFFER, stats


def test_a_refusal_says_why_affine_uint8_is_not_grouped_and_advises_what_groups(svc_engine):
    # uint8 scores take one range over every layer: the example runs whole, never in
    # groups, so it is refused at its whole size with the reason; float16 keeps groups
    # (uint8 would not: not advised to a float32 request of scores either).
    from service.limits import OutputLimits

    tokenized = svc_engine.tokenize([LONG])  # 38 tokens, padded to 67
    limits = OutputLimits(svc_engine, max_example_bytes=40_000)
    spec = svc_engine.make_spec(what=["attention", "scores"], dtype="uint8")
    assert svc_engine.part_bytes(spec, 67, 40_000) == svc_engine.output_bytes(spec, 67)
    message, field, limit = limits.check(spec, tokenized)
    assert (field, limit) == ("texts[0]", "max_example_bytes")
    assert "80.8 kB of attention, scores (3 layers x 3 heads, uint8) (not in layer groups: " in (
        message
    )
    assert "uint8 scores takes one range over every layer" in message
    assert message.endswith(" or float16"), message
    float32 = svc_engine.make_spec(what=["scores"], layers=[0, 1])
    message, _, _ = limits.check(float32, tokenized)
    assert "53.9 kB a layer group" in message and message.endswith(" or float16"), message
    attention = svc_engine.make_spec(what=["attention"])  # probabilities: uint8 groups
    assert limits.check(attention, tokenized)[0].endswith(" or uint8")


CAPTURE = "/jaxattn.v1.AttentionService/Capture"


def settled(condition, timeout: float = 10.0) -> None:
    """Wait until `condition()` holds (what the server does after a stream's last message)."""
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


@pytest.mark.parametrize(
    "dtype, codec, coalesce",
    [("uint8", "zstd", True), ("float16", "lz4", False)],
)
def test_grouped_examples_by_codec_and_dtype_are_counted_once_and_give_back_their_bytes(
    svc_engine, dtype, codec, coalesce
):
    # uint8 attention (probabilities: grouped) of LONG padded to 67 is 40,401 bytes,
    # 13,467 a layer; float16 twice that: both over 20,000 (30,000) bytes, a layer within.
    limit = {"uint8": 20_000, "float16": 30_000}[dtype]
    spec = svc_engine.make_spec(what=["attention"], dtype=dtype)
    assert svc_engine.part_bytes(spec, 67, limit) < limit < svc_engine.output_bytes(spec, 67)
    want = svc_engine.capture([LONG, SHORT, LONG], what="attention", dtype=dtype)
    options = dict(max_example_bytes=limit, request_buffer_bytes=BUFFER)
    with running_server(svc_engine, **options) as (server, address):
        with AttentionClient(address, timeout=60.0, coalesce=coalesce) as client:
            got = client.capture([LONG, SHORT, LONG], what=["attention"], dtype=dtype, codec=codec)
        batcher, sent = server.batcher, server.metrics.sent_examples.labels(dtype, codec)
        settled(lambda: batcher.admitted == 0 and sent._value.get() == 3)  # once each
        assert batcher.admitted == 0 and batcher._reserved == 0
        assert 0 < batcher.stats["peak_job_buffered_bytes"] <= BUFFER
    for g, w in zip(got, want, strict=True):
        assert g.tokens == w.tokens and g.quantization == w.quantization
        a, b = np.asarray(g.array("attention"), np.float32), w.array("attention")
        np.testing.assert_allclose(a, np.asarray(b, np.float32), rtol=2e-3, atol=1 / 255)


def test_a_drain_mid_example_finishes_the_stream_and_refuses_new_calls(svc_engine):
    import grpc

    from jaxattn.v1 import attention_pb2 as pb
    from jaxattn.wire import StreamDecoder

    want = svc_engine.capture([LONG], what="attention")[0]
    options = dict(max_example_bytes=LIMIT, request_buffer_bytes=BUFFER, grace_s=20.0)
    with running_server(svc_engine, **options) as (server, address):
        with grpc.insecure_channel(address) as channel:
            call = channel.unary_stream(
                CAPTURE,
                request_serializer=pb.CaptureRequest.SerializeToString,
                response_deserializer=lambda b: b,
            )
            request = pb.CaptureRequest(texts=[pb.Text(text=LONG)], what=["attention"])
            stream = call(request, timeout=60)
            decoder, got = StreamDecoder(), []
            got += decoder.feed_all(next(stream))  # the header: the example is under way
            settled(lambda: server.batcher.stats["group_waits"] > 0)  # waits between groups
            stopped = server.stop()  # SIGTERM: drain
            with pytest.raises(grpc.RpcError) as refused:
                list(call(request, timeout=60))
            for message in stream:
                got += decoder.feed_all(message)
            decoder.finish()
            assert stopped.wait(30)
    assert refused.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    assert len(got) == 1
    np.testing.assert_allclose(got[0].attention, want.attention, rtol=2e-5, atol=2e-6)
    assert server.batcher.admitted == 0 and server.batcher._reserved == 0


def test_a_stream_cut_between_groups_resumes_that_example_whole_on_another_replica(
    svc_engine, monkeypatch
):
    # The first replica is stopped once the client has a chunk of LONG's first group
    # (its header announced all three groups' chunks): the client drops what it had of
    # it and asks the second replica for texts[1:], which sends LONG again from its header
    # (coalesced, the client's default: items of several examples in a message).
    import contextlib

    from jaxattn.client import client as client_module
    from jaxattn.v1 import attention_pb2 as pb

    what = ["attention", "hidden_states"]
    texts = [SHORT, LONG, SHORT]
    policy = svc_engine.pipeline.group_policy
    svc_engine.pipeline.group_policy = GroupPolicy(0)
    try:
        want = svc_engine.capture(texts, what=what)
    finally:
        svc_engine.pipeline.group_policy = policy
    released = threading.Event()  # set once the answering replica is stopped

    class Gated:
        """The engine, its run holding after an example's first group until the cut, so
        no later group of it can reach the client first."""

        def __getattr__(self, name):
            return getattr(svc_engine, name)

        def run(self, *args, **kwargs):
            for pos, item in svc_engine.run(*args, **kwargs):
                yield pos, item
                if getattr(item, "last", True) is False:
                    released.wait(30)

    options = dict(max_example_bytes=LIMIT, request_buffer_bytes=BUFFER)
    with contextlib.ExitStack() as stack:
        stack.callback(released.set)  # never leave a run waiting
        servers = [stack.enter_context(running_server(Gated(), **options)) for _ in range(2)]
        cut = []

        class CutMidExample(client_module.StreamDecoder):
            def feed_all(self, message):
                caps = super().feed_all(message)
                response = pb.CaptureResponse.FromString(message)
                chunks = [m.chunk for m in [response, *response.items] if m.chunk.tensor]
                if not cut and any(c.example_index == 1 for c in chunks):
                    cut.append(min(c.byte_offset for c in chunks if c.example_index == 1))
                    for server, _ in servers:  # whichever answered: stop it at once
                        if server is answering[0]:
                            server.grpc_server.stop(0).wait(10)
                    released.set()
                return caps

        answering = []
        real_answering = client_module.AttentionClient._answering

        def record(self, i, call, deadline, fresh):
            answering.append(next(s for s, a in servers if a == self._channels.addresses[i]))
            return real_answering(self, i, call, deadline, fresh)

        monkeypatch.setattr(client_module, "StreamDecoder", CutMidExample)
        monkeypatch.setattr(client_module.AttentionClient, "_answering", record)
        addresses = [a for _, a in servers]
        with AttentionClient(addresses, timeout=60.0) as client:
            got = list(client.stream(texts, what=what))
            wire = client.wire_bytes
    assert cut == [0]  # LONG's first chunk arrived, then its replica was stopped
    sources = [c.provenance["source"].removeprefix("server ") for c in got]
    assert sources[0] != sources[1] == sources[2]
    for g, w in zip(got, want, strict=True):
        assert g.tokens == w.tokens
        for name in what:
            np.testing.assert_allclose(g.tensors[name], w.tensors[name], rtol=2e-5, atol=2e-6)
    whole = sum(t.nbytes for c in got for t in c.tensors.values())
    assert wire > whole  # LONG's first chunk came twice: dropped once, not assembled


@pytest.mark.parametrize("order", [(0, 1), (2, 1, 0)], ids=["two in order", "three reversed"])
def test_one_client_reading_grouped_calls_one_after_the_other(svc_engine, order):
    """Through gRPC (HTTP/2 flow control included): one thread opens two or three calls
    whose examples run in layer groups and reads them to their end one after another.
    Each call's groups wait for its own reader, so the worker must serve the call read
    while the others wait (test_service_layer_groups_nested.py has the batcher's side);
    before, the client waited on itself until the slow-reader cut-off failed a call. Read
    in reverse, the first two calls' runs hold both suspended slots (`SUSPENDED_RUNS`)
    and the third could not start: one of them is preempted, and restarts later
    (test_service_layer_groups_preempt.py); every call's Captures are the in-process
    engine's, the preempted one's later groups computed after its restart included."""
    import grpc

    from jaxattn.v1 import attention_pb2 as pb
    from jaxattn.wire.receive import StreamDecoder

    what = ["attention", "hidden_states"]
    policy = svc_engine.pipeline.group_policy
    svc_engine.pipeline.group_policy = GroupPolicy(0)
    try:
        (want,) = svc_engine.capture([LONG], what=what)  # one program
    finally:
        svc_engine.pipeline.group_policy = policy
    request = pb.CaptureRequest(texts=[pb.Text(text=LONG)] * 8, what=what)  # 490 kB a call
    # (before: the first call's deadline passed while its groups waited behind the
    # second's, unread; the cut-off, later, never came into it)
    options = dict(max_example_bytes=LIMIT, request_buffer_bytes=BUFFER, slow_reader_s=60.0)
    with running_server(svc_engine, **options) as (server, address):
        # HTTP/2's window stays at 64 KiB (no BDP probing): an unread call's sends
        # block, as they do once any window fills, so its groups wait for its reader
        with grpc.insecure_channel(address, [("grpc.http2.bdp_probe", 0)]) as channel:
            capture = channel.unary_stream(
                "/jaxattn.v1.AttentionService/Capture",
                request_serializer=pb.CaptureRequest.SerializeToString,
                response_deserializer=pb.CaptureResponse.FromString,
            )
            calls = [capture(request, timeout=30.0) for _ in order]
            time.sleep(0.5)  # the calls admitted and started before any reading
            got = []
            for i in order:  # DEADLINE_EXCEEDED here: the client waited on itself
                decoder = StreamDecoder()
                got.append([cap for m in calls[i] for cap in decoder.feed_all(m)])
                decoder.finish()
        stats = server.batcher.stats
    assert [len(caps) for caps in got] == [8] * len(order)
    first = got[0][0]
    for cap in (cap for caps in got for cap in caps):
        for name in what:
            np.testing.assert_allclose(
                cap.tensors[name], want.tensors[name], rtol=2e-5, atol=2e-6, err_msg=name
            )
            # the same groups' programs on the same input: the same bits, restarted or not
            np.testing.assert_array_equal(cap.tensors[name], first.tensors[name], err_msg=name)
    assert stats["group_waits"] > 0, stats  # the groups did wait for their readers
    assert stats["stalled"] == 0, stats
    if len(order) > 2:
        assert stats["preempted"] > 0, stats  # the third started by preempting a run
