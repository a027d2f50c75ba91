"""Round trips through a real in-process server: what arrives is what the engine computed."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from service_support import SENTENCES, TEXTS, WHAT

from jaxattn.errors import UsageError
from jaxattn.quantities import COMMON

ALL = COMMON


def assert_same(got, want, *, exact=True):
    assert got.tokens == want.tokens
    assert got.sentence_b_start == want.sentence_b_start
    assert (got.layers, got.heads, got.dtype) == (want.layers, want.heads, want.dtype)
    assert list(got.tensors) == list(want.tensors)
    assert got.quantization == want.quantization
    for name, array in want.tensors.items():
        assert got.tensors[name].dtype == array.dtype, name
        assert got.tensors[name].shape == array.shape, name
        if exact:  # bit for bit, NaN payloads and signed zeros included
            assert got.tensors[name].tobytes() == array.tobytes(), name


@pytest.mark.parametrize("codec", ["none", "zstd", "lz4"])
def test_float32_round_trip_is_bit_exact(client, svc_engine, codec):
    want = svc_engine.capture(TEXTS, what=ALL)
    got = client.capture(TEXTS, what=ALL, codec=codec)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert_same(g, w)
    assert got[1].sentence_b_start == want[1].sentence_b_start is not None
    assert got[0].sentence_b_start is None


def test_uint8_within_2e3_with_layer_and_head_selection(client, svc_engine):
    exact = svc_engine.capture(TEXTS, what=WHAT)
    sel = dict(what=WHAT, layers=[2, 0], heads=1, dtype="uint8")
    want = svc_engine.capture(TEXTS, **sel)
    got = client.capture(TEXTS, codec="zstd", **sel)
    for g, w, e in zip(got, want, exact, strict=True):
        assert_same(g, w)  # the wire adds nothing to the quantisation
        assert g.layers == (0, 2) and g.heads == (1,)
        assert g.tensors["attention"].dtype == np.uint8
        assert g.attention.shape == (2, 1, g.length, g.length)
        ref = e.attention[[0, 2]][:, [1]]
        assert np.abs(g.attention - ref).max() <= 2e-3
        ref = e.alpha_fx_norm[[0, 2]][:, [1]]
        assert np.abs(g.alpha_fx_norm - ref).max() <= np.ptp(ref) / 510 + 1e-5


def test_many_examples_with_tiny_chunks_reassemble_in_order(client, svc_engine):
    texts = [SENTENCES[i % len(SENTENCES)] for i in range(40)]
    texts[7] = (SENTENCES[2], SENTENCES[3])
    want = svc_engine.capture(texts, what=WHAT)
    seen = []
    for cap in client.stream(texts, what=WHAT, codec="zstd", max_chunk_bytes=1024):
        seen.append(cap)
    assert len(seen) == len(texts)
    for g, w in zip(seen, want, strict=True):
        assert_same(g, w)


def test_chunks_respect_max_chunk_bytes_on_the_wire(address, svc_engine):
    from jaxattn.v1 import attention_pb2 as pb
    from jaxattn.v1 import attention_pb2_grpc as pb_grpc

    texts = [pb.Text(text=SENTENCES[2]), pb.Text(text=SENTENCES[0], text_pair=SENTENCES[1])]
    texts += [pb.Text(text=s) for s in SENTENCES[3:5]]
    request = pb.CaptureRequest(
        texts=texts, what=list(WHAT), codec=pb.CODEC_LZ4, max_chunk_bytes=1024
    )
    with grpc.insecure_channel(address) as channel:
        messages = list(pb_grpc.AttentionServiceStub(channel).Capture(request, timeout=30))
    headers = [m.header for m in messages if m.WhichOneof("item") == "header"]
    chunks = [m.chunk for m in messages if m.WhichOneof("item") == "chunk"]
    assert [h.index for h in headers] == [0, 1, 2, 3]
    assert sum(h.chunk_count for h in headers) == len(chunks)
    assert len(chunks) > 2 * len(WHAT)  # tensors really were split
    assert all(len(c.data) <= 1024 and c.byte_length <= 1024 for c in chunks)
    assert {c.datatype for c in chunks} == {"FP32"}
    assert headers[1].HasField("sentence_b_start") and not headers[0].HasField("sentence_b_start")


def test_a_request_chooses_its_compute_precision(client, svc_engine):
    want = svc_engine.capture(TEXTS[:2], what=WHAT, precision="bf16")
    got = client.capture(TEXTS[:2], what=WHAT, precision="bf16")
    for g, w in zip(got, want, strict=True):
        assert g.precision == w.precision == "bf16"
        assert_same(g, w)
    assert client.capture(TEXTS[:1], what=WHAT)[0].precision == "highest"  # the default
    with pytest.raises(UsageError, match="unknown precision 'fp8'"):
        client.capture(TEXTS[:1], precision="fp8")


def test_model_info_matches_the_engine(client, svc_engine):
    assert client.model_info() == svc_engine.info
    raw = client.server_info()
    assert list(raw.quantities) == list(COMMON)
    assert (raw.max_texts, raw.max_tokens) == (64, 1500)


def test_health_and_reflection(address):
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for name in ("", "jaxattn.v1.AttentionService"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        (reply,) = list(stub.ServerReflectionInfo(iter([request]), timeout=5))
        names = {s.name for s in reply.list_services_response.service}
        assert "jaxattn.v1.AttentionService" in names
