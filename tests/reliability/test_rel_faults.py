"""Faults on a live server: vanished, slow and stalled clients, deadlines, engine errors."""

from __future__ import annotations

import logging
import threading
import time

import grpc
import pytest
from rel_support import (
    MARKER,
    SENTENCES,
    WHAT,
    FaultyEngine,
    Proxy,
    SlowEngine,
    assert_right,
    raw_capture,
    request_bytes,
    running_server,
    wait_for,
)

from jaxattn.client import AttentionClient, AttentionServiceError
from jaxattn.wire import StreamDecoder

TEXTS = [SENTENCES[i % len(SENTENCES)] for i in range(24)]
# A client whose HTTP/2 window stays 16 KiB: reading slowly really holds the server back.
TINY_WINDOW = [("grpc.http2.lookahead_bytes", 16384), ("grpc.http2.bdp_probe", 0)]


def still_serves_right_answers(address, expected) -> None:
    with AttentionClient(address, timeout=30) as client:
        assert_right(client.capture(list(SENTENCES), what=WHAT), SENTENCES, expected)


def test_client_vanishing_mid_stream_frees_its_slot_and_drops_its_work(rel_engine, expected):
    engine = SlowEngine(rel_engine, delay=0.05)
    with running_server(engine) as (server, address):
        proxy = Proxy(address)
        with AttentionClient(proxy.address, timeout=30, retries=0) as client:
            stream = client.stream(TEXTS, what=WHAT)
            assert next(stream).tokens == expected[TEXTS[0]].tokens
            proxy.cut()  # TCP reset: no goodbye, no cancel from the client
            with pytest.raises(AttentionServiceError) as info:
                list(stream)
            assert info.value.code == grpc.StatusCode.UNAVAILABLE
        wait_for(lambda: server.batcher.admitted == 0, 5, "the slot freed")
        wait_for(lambda: engine.runs == server.batcher.stats["batches"], 5)
        assert engine.yielded < len(TEXTS)  # the rest was never computed
        assert server.batcher.buffered_bytes == 0
        still_serves_right_answers(address, expected)
        proxy.close()


def test_slow_reader_is_flow_controlled_and_others_are_served_meanwhile(rel_engine, expected):
    example = expected[TEXTS[0]].candidates["attention"][0].nbytes  # ~3-4 kB
    limit = 3 * example
    with running_server(rel_engine, request_buffer_bytes=limit, max_batch_examples=4) as (
        server,
        address,
    ):
        call = grpc.insecure_channel(address, TINY_WINDOW).unary_stream(
            "/jaxattn.v1.AttentionService/Capture",
            request_serializer=None,
            response_deserializer=None,
        )(request_bytes(TEXTS * 4), timeout=60)
        decoder, caps = StreamDecoder(), []
        fast: list[float] = []

        def others():  # a second client, at full speed, while the slow one is read
            with AttentionClient(address, timeout=30) as client:
                for text in SENTENCES:
                    t0 = time.monotonic()
                    assert_right(client.capture([text], what=WHAT), [text], expected)
                    fast.append(time.monotonic() - t0)

        helper = threading.Thread(target=others)
        for k, message in enumerate(call):
            cap = decoder.feed_bytes(message)
            if cap is not None:
                caps.append(cap)
            if k == 4:
                helper.start()
            time.sleep(0.01)
        helper.join(30)
        assert_right(caps, TEXTS * 4, expected)
        peak = server.batcher.stats["peak_job_buffered_bytes"]
        assert 0 < peak <= limit  # never more than the limit waited for this client
        assert len(fast) == len(SENTENCES) and max(fast) < 5  # nobody waited for it


def test_client_that_stops_reading_is_cut_off_and_its_memory_freed(rel_engine, expected, caplog):
    caplog.set_level(logging.INFO, logger="jaxattn.service")
    example = expected[TEXTS[0]].candidates["attention"][0].nbytes
    with running_server(rel_engine, request_buffer_bytes=2 * example, slow_reader_s=0.5) as (
        server,
        address,
    ):
        channel = grpc.insecure_channel(address, TINY_WINDOW)
        call = channel.unary_stream(
            "/jaxattn.v1.AttentionService/Capture",
            request_serializer=None,
            response_deserializer=None,
        )(request_bytes(TEXTS * 8), timeout=60)
        next(call)  # then read nothing: the server's sends block on flow control
        wait_for(lambda: server.batcher.stats["stalled"] == 1, 10, "the stall noticed")
        wait_for(lambda: server.batcher.admitted == 0, 5, "the slot freed")
        assert server.batcher.buffered_bytes == 0
        with pytest.raises(grpc.RpcError) as info:
            list(call)
        assert info.value.code() == grpc.StatusCode.CANCELLED  # a cut-off, as gRPC can say it
        wait_for(lambda: "status=RESOURCE_EXHAUSTED" in caplog.text, 5)
        still_serves_right_answers(address, expected)
        channel.close()


def test_deadline_passing_mid_stream_stops_the_work(rel_engine, expected):
    engine = SlowEngine(rel_engine, delay=0.1)
    with running_server(engine) as (server, address):
        with AttentionClient(address, timeout=30, retries=0) as client:
            got = []
            start = time.monotonic()
            with pytest.raises(AttentionServiceError) as info:
                for cap in client.stream(TEXTS, what=WHAT, timeout=0.8):
                    got.append(cap)
            assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            assert time.monotonic() - start < 3
            assert 0 < len(got) < len(TEXTS)
            assert_right(got, TEXTS[: len(got)], expected)
        wait_for(lambda: server.batcher.admitted == 0, 5, "the slot freed")
        wait_for(lambda: engine.runs == server.batcher.stats["batches"], 5)
        time.sleep(0.3)
        assert engine.yielded < len(TEXTS)
        engine.delay = 0
        still_serves_right_answers(address, expected)


class SlowToCheck(SlowEngine):
    """Tokenising (inside the request's validation, before admission) takes `delay` s."""

    def __init__(self, engine, delay: float):
        super().__init__(engine, delay)
        self.tokenize = self._slow_tokenize  # EngineProxy's is the engine's own

    def _slow_tokenize(self, *args, **kwargs):
        time.sleep(self.delay)
        return self.engine.tokenize(*args, **kwargs)


def test_a_call_that_ends_while_its_request_is_checked_frees_its_slot(rel_engine, expected):
    """Its deadline passes while the request is validated: the job it then submits
    has no call to report to, and must neither hold its slot nor run."""
    engine = SlowToCheck(rel_engine, delay=0.6)
    with running_server(engine, queue_size=1) as (server, address):
        with AttentionClient(address, timeout=30, retries=0) as client:
            for _ in range(2):  # the second would find the one slot taken
                with pytest.raises(AttentionServiceError) as info:
                    client.capture(list(SENTENCES), what=WHAT, timeout=0.2)
                assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
                time.sleep(0.8)  # its validation ends and its job is submitted
                wait_for(lambda: server.batcher.admitted == 0, 5, "the slot freed")
        assert engine.runs == 0
        engine.delay = 0
        still_serves_right_answers(address, expected)


@pytest.mark.parametrize("eager", [False, True], ids=["in-batch", "at-call"])
def test_engine_error_fails_only_the_requests_of_its_batch(rel_engine, expected, eager):
    engine = FaultyEngine(rel_engine, eager=eager)
    with running_server(engine, batch_window_s=0.3) as (server, address):
        results = {}

        def call(name, texts, what):
            with grpc.insecure_channel(address) as channel:
                results[name] = raw_capture(channel, request_bytes(texts, what), timeout=30)

        threads = [  # same spec within the window: one batch; another spec: its own batch
            threading.Thread(target=call, args=("bad", [MARKER, SENTENCES[0]], WHAT)),
            threading.Thread(target=call, args=("mate", [SENTENCES[1]], WHAT)),
            threading.Thread(target=call, args=("other", [SENTENCES[2]], ("attention", "keys"))),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        for name in ("bad", "mate"):
            code, details, caps = results[name]
            assert code == grpc.StatusCode.INTERNAL, results[name]
            assert "injected engine fault" in details and "RuntimeError" in details
        code, _, caps = results["other"]
        assert code == grpc.StatusCode.OK and caps[0].tokens == expected[SENTENCES[2]].tokens
        assert server.batcher.admitted == 0
        still_serves_right_answers(address, expected)


def test_client_never_hangs_on_a_server_that_never_answers():
    import socket

    blackhole = socket.create_server(("127.0.0.1", 0))  # accepts, never speaks HTTP/2
    address = f"127.0.0.1:{blackhole.getsockname()[1]}"
    with AttentionClient(address, timeout=1.0, retries=5, backoff=(0.05, 0.2)) as client:
        for call in (client.model_info, lambda: client.capture(["a b c"])):
            start = time.monotonic()
            with pytest.raises(AttentionServiceError) as info:
                call()
            assert time.monotonic() - start < 3
            assert info.value.code in (
                grpc.StatusCode.DEADLINE_EXCEEDED,
                grpc.StatusCode.UNAVAILABLE,
            )
    blackhole.close()


def _outcomes(address, n: int, outcomes: list) -> list[threading.Thread]:
    """n concurrent calls of one short sentence; each appends "OK" or (code, limit)."""

    def call():
        with AttentionClient(address, timeout=30, retries=0) as client:
            try:
                client.capture([SENTENCES[0]], what=WHAT)
                outcomes.append("OK")
            except AttentionServiceError as e:
                outcomes.append((e.code, e.limit))

    threads = [threading.Thread(target=call) for _ in range(n)]
    for t in threads:
        t.start()
    return threads


def test_slow_requests_leave_threads_for_health_checks(rel_engine):
    """24 handler threads, 4 kept from Capture: 24 slow-to-check calls at once, 20 are
    checked, 4 refused at once, and a health check still answers."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    engine = SlowToCheck(rel_engine, delay=2.0)
    with running_server(engine, queue_size=16, max_workers=24) as (server, address):
        outcomes: list = []
        threads = _outcomes(address, 24, outcomes)
        wait_for(lambda: len(outcomes) == 4, 5, "the calls over the bound refused")
        assert outcomes == [(grpc.StatusCode.RESOURCE_EXHAUSTED, "queue_size")] * 4
        with grpc.insecure_channel(address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            answer = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        for t in threads:
            t.join(30)
        assert len(outcomes) == 24 and outcomes.count("OK") >= 8  # the queue holds 16


def test_ordinary_concurrency_is_never_refused(rel_engine):
    """Half the default queue of clients at once: every call answered."""
    with running_server(rel_engine) as (server, address):
        outcomes: list = []
        for t in _outcomes(address, 32, outcomes):
            t.join(60)
        assert outcomes == ["OK"] * 32
