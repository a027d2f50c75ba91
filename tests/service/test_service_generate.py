"""Generation through the service (CaptureRequest.generate): a real server on port 0 with
the tiny random GPT-2 continues each text and captures prompt + continuation, equal to
the local engine's `capture(generate=N)`, through the client and as attention.proto's
comments describe the header (limits and refusals: test_service_generate_refusals.py)."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from generate_support import PROMPTS
from service_support import assert_same_captures

from jaxattn.v1 import attention_pb2 as pb

WHAT = ("attention", "alpha_fx_norm")
NEW = 5


@pytest.mark.parametrize("stop_at_eos", [False, True])
def test_the_servers_continuations_and_captures_are_the_local_engines(
    svc_gpt2, gpt2_client, stop_at_eos
):
    got = gpt2_client.capture(PROMPTS, what=WHAT, generate=NEW, stop_at_eos=stop_at_eos)
    want = svc_gpt2.capture(PROMPTS, what=WHAT, generate=NEW, stop_at_eos=stop_at_eos)
    assert_same_captures(got, want)
    gens = svc_gpt2.generate(PROMPTS, NEW, stop_at_eos=stop_at_eos)
    for cap, g in zip(got, gens, strict=True):
        # the boundary is the prompt's own length; the tokens after it the continuation
        assert (
            cap.generated_start == g.prompt.length == len(svc_gpt2.tokenize([g.prompt.text])[0].ids)
        )
        assert cap.tokens[cap.generated_start :] == g.tokens
        assert cap.stop == g.stop  # ExampleHeader.stop
        if not stop_at_eos:
            assert len(cap.tokens) == cap.generated_start + NEW


def test_positions_and_a_stream_of_one_text_at_a_time(svc_gpt2, gpt2_client):
    """query_positions from the end pick the continuation's rows, whatever its length."""
    kw = dict(what=["attention"], generate=3, stop_at_eos=False, query_positions=[-3, -2, -1])
    got = list(gpt2_client.capture_iter(PROMPTS, window=1, **kw))
    want = svc_gpt2.capture(PROMPTS, **kw)
    assert_same_captures(got, want)
    for cap in got:
        assert cap.query_positions == tuple(range(cap.generated_start, len(cap.tokens)))


def test_the_header_says_where_the_continuation_starts_as_the_proto_says(svc_gpt2, gpt2_address):
    """Raw gRPC, from attention.proto's comments: tokens[:generated_start] are the prompt's,
    the rest the continuation; absent without generate; the float32 attention is the
    engine's bit for bit."""
    want = svc_gpt2.capture(PROMPTS[:2], generate=NEW, stop_at_eos=False)
    request = dict(texts=[pb.Text(text=t) for t in PROMPTS[:2]], codec=pb.CODEC_NONE)
    with grpc.insecure_channel(gpt2_address) as channel:
        rpc = channel.unary_stream(
            "/jaxattn.v1.AttentionService/Capture",
            request_serializer=pb.CaptureRequest.SerializeToString,
            response_deserializer=pb.CaptureResponse.FromString,
        )
        plain = [
            m.header for m in rpc(pb.CaptureRequest(**request), timeout=60) if m.HasField("header")
        ]
        messages = list(
            rpc(pb.CaptureRequest(**request, generate=NEW, ignore_eos=True), timeout=60)
        )
    assert not any(h.HasField("generated_start") or h.HasField("stop") for h in plain)
    headers = [m.header for m in messages if m.HasField("header")]
    for h, w in zip(headers, want, strict=True):
        prompt = svc_gpt2.tokenize([w.text])[0]
        assert h.HasField("generated_start") and h.generated_start == prompt.length
        assert tuple(h.tokens[: h.generated_start]) == prompt.tokens
        assert len(h.tokens) == prompt.length + NEW and h.stop == "max_new_tokens"
    chunks = [m.chunk for m in messages if m.HasField("chunk")]
    for k, w in enumerate(want):  # one chunk each: small tensors
        (c,) = [c for c in chunks if c.example_index == k]
        got = np.frombuffer(c.data, "<f4").reshape(tuple(c.shape))
        np.testing.assert_array_equal(got.view(np.uint32), w.attention.view(np.uint32))


def test_the_generated_tokens_counter_on_the_metrics_endpoint(svc_gpt2):
    """jaxattn_generated_tokens_total over HTTP: every generated token counted once, and a
    plain capture counts none (two prompts, NEW tokens each past any EOS: 2 x NEW)."""
    import urllib.request

    from local_server import running_server
    from prometheus_client.parser import text_string_to_metric_families

    from jaxattn.client import AttentionClient

    def generated(server) -> float:
        url = f"http://127.0.0.1:{server.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
        return next(
            s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "jaxattn_generated_tokens_total"
        )

    with running_server(svc_gpt2, max_new_tokens=NEW, metrics_port=0) as (server, address):
        assert generated(server) == 0
        with AttentionClient(address, timeout=60) as client:
            client.capture(PROMPTS[:2], generate=NEW, stop_at_eos=False)
            assert generated(server) == 2 * NEW
            client.capture(PROMPTS[:2])
        assert generated(server) == 2 * NEW
