"""A client that goes while its request is being checked: the call ends as CANCELLED in
the server's log, not as a server failure (INTERNAL) when the answer's headers are sent."""

from __future__ import annotations

import logging
import threading
import time

import grpc
from local_server import running_server

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
