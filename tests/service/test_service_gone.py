"""A client that goes while its request is being checked: the call ends as CANCELLED in
the server's log, not as a server failure (INTERNAL) when the answer's headers are sent."""

from __future__ import annotations

import logging
import threading
import time

import grpc
import pytest
from local_server import running_server
from service_support import GatedEngine

from jaxattn.client.client import CAPTURE_METHOD
from jaxattn.v1 import attention_pb2 as pb
from service import servicer as servicer_module
from service.requests import RequestParser


def test_a_client_gone_before_the_headers_is_cancelled_not_a_failure(
    svc_engine, monkeypatch, caplog
):
    contexts, parsed = [], threading.Event()
    real_caller, real_parse = servicer_module.caller, RequestParser.parse

    def keeping_the_context(context):
        contexts.append(context)
        return real_caller(context)

    def parse_until_the_client_went(self, request):
        out = real_parse(self, request)
        parsed.set()
        end = time.monotonic() + 10
        while contexts[-1].is_active() and time.monotonic() < end:
            time.sleep(0.01)
        return out

    monkeypatch.setattr(servicer_module, "caller", keeping_the_context)
    monkeypatch.setattr(RequestParser, "parse", parse_until_the_client_went)
    caplog.set_level(logging.INFO, logger=servicer_module.log.name)
    with running_server(svc_engine) as (_, address), grpc.insecure_channel(address) as channel:
        capture = channel.unary_stream(
            CAPTURE_METHOD, request_serializer=pb.CaptureRequest.SerializeToString
        )
        call = capture(pb.CaptureRequest(texts=[pb.Text(text="the cat sat")], what=["attention"]))
        assert parsed.wait(10)
        call.cancel()
        end = time.monotonic() + 10
        while "status=" not in caplog.text and time.monotonic() < end:
            time.sleep(0.01)
    assert not contexts[-1].is_active()
    assert "status=CANCELLED" in caplog.text, caplog.text
    assert "Capture failed" not in caplog.text


def test_a_deadline_the_batcher_sees_first_is_deadline_exceeded_not_unavailable(
    svc_engine, monkeypatch, caplog
):
    """The batcher drops a job past its deadline, and may do so before gRPC has ended the
    call: the handler then still finds the call active. That is DEADLINE_EXCEEDED (it
    was answered UNAVAILABLE, "the server is shutting down": once in 20,000 requests of
    the faulty-network run). gRPC's side of the race is held off here by a context that
    says it is active."""
    gated = GatedEngine(svc_engine)
    monkeypatch.setattr(grpc._server._Context, "is_active", lambda self: True)
    caplog.set_level(logging.INFO, logger=servicer_module.log.name)
    with running_server(gated) as (_, address), grpc.insecure_channel(address) as channel:
        capture = channel.unary_stream(
            CAPTURE_METHOD, request_serializer=pb.CaptureRequest.SerializeToString
        )
        call = capture(pb.CaptureRequest(texts=[pb.Text(text="the cat sat")]), timeout=0.5)
        assert gated.entered.wait(10)
        time.sleep(0.6)  # past the deadline while the batch is held
        gated.gate.set()
        with pytest.raises(grpc.RpcError) as err:
            list(call)
        end = time.monotonic() + 10
        while "status=" not in caplog.text and time.monotonic() < end:
            time.sleep(0.01)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "status=DEADLINE_EXCEEDED" in caplog.text, caplog.text
