"""Admission, cancellation and deadlines against the real engine, held at a gate."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from service_support import SENTENCES, WHAT, running_server

from jaxattn.client import AttentionClient, AttentionServiceError
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.v1 import attention_pb2_grpc as pb_grpc


def request(n: int) -> pb.CaptureRequest:
    texts = [pb.Text(text=SENTENCES[i % len(SENTENCES)]) for i in range(n)]
    return pb.CaptureRequest(texts=texts, what=list(WHAT))


def wait_for(predicate, timeout=10.0):
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.01)


def drain_quietly(call) -> None:
    try:
        list(call)
    except grpc.RpcError:
        pass


def test_full_queue_answers_resource_exhausted(gated):
    with running_server(gated, queue_size=1) as (server, address):
        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.AttentionServiceStub(channel)
            first = stub.Capture(request(2), timeout=30)
            holder = threading.Thread(target=lambda: list(first))
            holder.start()
            assert gated.entered.wait(10)
            with pytest.raises(grpc.RpcError) as info:
                list(stub.Capture(request(1), timeout=10))
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "queue is full" in info.value.details()
            gated.gate.set()
            holder.join(30)
            assert first.code() == grpc.StatusCode.OK
        assert server.batcher.stats["rejected"] == 1


def test_cancelled_stream_frees_its_slot_and_its_work_is_dropped(gated):
    with running_server(gated, queue_size=1) as (server, address):
        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.AttentionServiceStub(channel)
            doomed = stub.Capture(request(8), timeout=30)
            threading.Thread(target=drain_quietly, args=(doomed,), daemon=True).start()
            assert gated.entered.wait(10)
            doomed.cancel()
            wait_for(lambda: server.batcher.admitted == 0)
            second = stub.Capture(request(1), timeout=30)  # takes the freed slot
            gated.gate.set()
            messages = list(second)
        assert messages[0].header.index == 0
        assert gated.closed_early == 1  # the cancelled batch was abandoned ...
        assert gated.yielded < 8 + 1  # ... before all its examples were produced
        assert server.batcher.stats["abandoned"] == 1


def test_deadline_exceeded_and_the_expired_job_never_runs(gated):
    with running_server(gated, queue_size=2) as (server, address):
        with AttentionClient(address, timeout=30) as client:
            holder = threading.Thread(target=lambda: client.capture(SENTENCES[:2], what=WHAT))
            holder.start()
            assert gated.entered.wait(10)
            start = time.monotonic()
            with pytest.raises(AttentionServiceError) as info:
                client.capture(SENTENCES[2:3], what=WHAT, timeout=0.5)
            assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            assert time.monotonic() - start < 5
            wait_for(lambda: server.batcher.admitted == 1)  # only the holder is left
            gated.gate.set()
            holder.join(30)
        assert gated.runs == [2]  # the expired request was dropped, not computed
        assert server.batcher.stats["dropped"] == 1


def test_client_default_timeout_bounds_every_call(gated):
    with running_server(gated) as (_, address):
        with AttentionClient(address, timeout=0.3, retries=0) as client:
            with pytest.raises(AttentionServiceError) as info:
                client.capture(SENTENCES[:1], what=WHAT)
            assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        gated.gate.set()


def test_unreachable_server_is_retried_then_reported():
    with AttentionClient(
        ["127.0.0.1:1", "127.0.0.1:2"], timeout=5, retries=2, backoff=(0.01, 0.02)
    ) as client:
        start = time.monotonic()
        with pytest.raises(AttentionServiceError) as info:
            client.capture(["a"])
        assert info.value.code == grpc.StatusCode.UNAVAILABLE
        assert time.monotonic() - start < 5


def test_round_robin_spreads_calls_and_fails_over(svc_engine):
    with running_server(svc_engine) as (s1, a1), running_server(svc_engine) as (s2, a2):
        with AttentionClient([a1, "127.0.0.1:1", a2], timeout=30, backoff=(0.01, 0.02)) as c:
            for _ in range(6):
                (cap,) = c.capture(SENTENCES[3:4], what=WHAT)
                assert cap.tokens[0] == "[CLS]"
        assert s1.batcher.stats["jobs"] >= 2 and s2.batcher.stats["jobs"] >= 2
