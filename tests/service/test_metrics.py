"""The Prometheus endpoint (service/metrics.py): scraped over HTTP, its counts checked
against the requests these tests sent and the bytes their client received."""

from __future__ import annotations

import re
import socket
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from service_support import SENTENCES, WHAT, running_server

from jaxattn.errors import UsageError
from jaxattn.v1 import attention_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]
CAPTURE = "/jaxattn.v1.AttentionService/Capture"
MAX_TEXTS = 5
MAX_BATCH = 8


def scrape(server) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} read from the server's /metrics over HTTP."""
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def settled(server, name: str, want: float, timeout: float = 30.0, **labels) -> dict:
    """Scrapes until `name` reaches `want`: the batcher reports an engine call after
    its last example was handed over, and a cancelled call ends after its client
    saw CANCELLED, so either may come after the client is done."""
    end = time.monotonic() + timeout
    while (samples := scrape(server)) and (got := value(samples, name, **labels)) < want:
        assert time.monotonic() < end, f"{name}{labels} stayed at {got}, not {want}"
        time.sleep(0.01)
    return samples


def capture_bytes(channel, request, metadata=()) -> list[bytes]:
    """The serialised CaptureResponse messages of one call, as received."""
    call = channel.unary_stream(
        CAPTURE,
        request_serializer=pb.CaptureRequest.SerializeToString,
        response_deserializer=lambda b: b,
    )
    return list(call(request, timeout=60, metadata=metadata))


def texts(n: int, start: int = 0) -> list[pb.Text]:
    return [pb.Text(text=SENTENCES[(start + i) % len(SENTENCES)]) for i in range(n)]


@pytest.fixture(scope="module")
def metered(svc_engine):
    with running_server(
        svc_engine, metrics_port=0, max_texts=MAX_TEXTS, max_batch_examples=MAX_BATCH
    ) as s:
        yield s


def test_counters_match_the_requests_sent_and_the_bytes_received(metered, svc_engine):
    server, address = metered
    before = scrape(server)
    # One spec no other test asks for (a new program): one text compiles exactly
    # one shape (that spec, bucket 32, batch size 1) the first time, none after.
    fresh = dict(what=["attention"], layers=[1], heads=[0], dtype=pb.DTYPE_FLOAT16)
    ok = [  # (request, its dtype and codec labels)
        (pb.CaptureRequest(texts=texts(3), what=WHAT), ("float32", "none")),
        (pb.CaptureRequest(texts=texts(2, 3), what=WHAT), ("float32", "none")),
        # Coalesced: several examples' items in one message, each example counted once.
        (pb.CaptureRequest(texts=texts(4, 1), what=WHAT, coalesce=True), ("float32", "none")),
        (pb.CaptureRequest(texts=texts(1), what=WHAT, codec=pb.CODEC_ZSTD), ("float32", "zstd")),
        (pb.CaptureRequest(texts=texts(1, 5), codec=pb.CODEC_LZ4, **fresh), ("float16", "lz4")),
    ]
    received: dict[tuple, int] = {}
    compiled = []
    with grpc.insecure_channel(address) as channel:
        for request, labels in ok:
            messages = capture_bytes(channel, request)
            received[labels] = received.get(labels, 0) + sum(len(m) for m in messages)
            compiled.append(value(scrape(server), "jaxattn_compiled_shapes_total"))
        # The same new-spec request again: its shape is compiled now.
        request, labels = ok[-1]
        received[labels] += sum(len(m) for m in capture_bytes(channel, request))
        ok.append(ok[-1])
        with pytest.raises(grpc.RpcError) as invalid:
            capture_bytes(channel, pb.CaptureRequest(texts=texts(1), what=WHAT, layers=[99]))
        assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as refused:
            capture_bytes(channel, pb.CaptureRequest(texts=texts(MAX_TEXTS + 1), what=WHAT))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        info = channel.unary_unary(
            "/jaxattn.v1.AttentionService/GetModelInfo",
            request_serializer=pb.GetModelInfoRequest.SerializeToString,
            response_deserializer=pb.ModelInfo.FromString,
        )
        info(pb.GetModelInfoRequest(), timeout=10)
    sizes = [len(request.texts) for request, _ in ok]
    # Sent one at a time: one engine call per request.
    after = settled(server, "jaxattn_batch_examples_count", len(ok))

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("jaxattn_requests_total", method="Capture", code="OK") == len(ok)
    assert delta("jaxattn_requests_total", method="Capture", code="INVALID_ARGUMENT") == 1
    assert delta("jaxattn_requests_total", method="Capture", code="RESOURCE_EXHAUSTED") == 1
    assert delta("jaxattn_requests_total", method="GetModelInfo", code="OK") == 1
    assert delta("jaxattn_request_duration_seconds_count", method="Capture") == len(ok) + 2
    assert value(after, "jaxattn_requests_in_flight", method="Capture") == 0
    assert delta("jaxattn_refusals_total", limit="max_texts", client="") == 1
    for labels, nbytes in received.items():
        dtype, codec = labels
        assert delta("jaxattn_sent_bytes_total", dtype=dtype, codec=codec) == nbytes, labels
        want = sum(n for n, (_, lab) in zip(sizes, ok, strict=True) if lab == labels)
        assert delta("jaxattn_sent_examples_total", dtype=dtype, codec=codec) == want, labels
    assert delta("jaxattn_send_seconds_count") == len(ok)
    assert delta("jaxattn_batch_examples_sum") == sum(sizes)
    assert delta("jaxattn_batch_requests_sum") == len(ok)
    assert delta("jaxattn_batch_fill_ratio_sum") == pytest.approx(sum(sizes) / MAX_BATCH)
    assert delta("jaxattn_engine_seconds_count") == len(ok)
    # The new spec compiled one shape on its first request, nothing on its second.
    assert compiled[-1] - compiled[-2] == 1
    assert value(after, "jaxattn_compiled_shapes_total") == compiled[-1]
    assert value(after, "jaxattn_compiled_shapes_total") == svc_engine.compiled_shapes
    assert value(after, "jaxattn_queue_admitted") == 0
    assert value(after, "jaxattn_queue_capacity") == server.options.queue_size


def test_reliability_lists_every_metric_and_only_those(metered):
    server, _ = metered
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        families = list(text_string_to_metric_families(answer.read().decode()))
    served = {
        f.name + ("_total" if f.type == "counter" else "")
        for f in families
        if f.name.startswith("jaxattn_") and not f.name.endswith("_created")
    }  # (the text format shows each counter's and histogram's start time as NAME_created)
    text = (ROOT / "RELIABILITY.md").read_text()
    section = text[text.index("## Metrics") :]
    section = section[: section.index("\n## ")]
    listed = set(re.findall(r"`(jaxattn_[a-z_]+)`", section))
    assert served == listed


def test_refusals_name_the_client_that_client_of_gives(metered):
    """The hook a per-client quota plugs into: metadata -> the client's name."""
    server, address = metered
    server.metrics.client_of = lambda metadata: dict(metadata).get("x-client", "")
    try:
        with grpc.insecure_channel(address) as channel:
            with pytest.raises(grpc.RpcError):
                request = pb.CaptureRequest(texts=texts(MAX_TEXTS + 1), what=WHAT)
                capture_bytes(channel, request, metadata=(("x-client", "alice"),))
    finally:
        server.metrics.client_of = None
    assert value(scrape(server), "jaxattn_refusals_total", limit="max_texts", client="alice") == 1


def test_queue_depth_and_admission_refusals(gated):
    with running_server(gated, queue_size=1, metrics_port=0) as (server, address):
        with grpc.insecure_channel(address) as channel:
            held = threading.Thread(
                target=capture_bytes, args=(channel, pb.CaptureRequest(texts=texts(2), what=WHAT))
            )
            held.start()
            assert gated.entered.wait(10)
            during = scrape(server)
            with pytest.raises(grpc.RpcError) as refused:
                capture_bytes(channel, pb.CaptureRequest(texts=texts(1), what=WHAT))
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            gated.gate.set()
            held.join(30)
        after = scrape(server)
    assert value(during, "jaxattn_queue_admitted") == 1
    assert value(during, "jaxattn_queue_pending") == 0  # it is in the engine
    assert value(during, "jaxattn_requests_in_flight", method="Capture") == 1
    assert value(during, "jaxattn_queue_capacity") == 1
    assert value(after, "jaxattn_refusals_total", limit="queue_size", client="") == 1
    assert value(after, "jaxattn_requests_total", method="Capture", code="OK") == 1
    assert value(after, "jaxattn_queue_admitted") == 0


def test_a_call_its_client_cancels_counts_cancelled_and_leaves_nothing_in_flight(gated):
    with running_server(gated, metrics_port=0) as (server, address):
        with grpc.insecure_channel(address) as channel:
            call = channel.unary_stream(
                CAPTURE,
                request_serializer=pb.CaptureRequest.SerializeToString,
                response_deserializer=lambda b: b,
            )(pb.CaptureRequest(texts=texts(2), what=WHAT), timeout=30)
            assert gated.entered.wait(10)
            assert value(scrape(server), "jaxattn_requests_in_flight", method="Capture") == 1
            call.cancel()
            gated.gate.set()
            after = settled(server, "jaxattn_requests_total", 1, method="Capture", code="CANCELLED")
    assert value(after, "jaxattn_requests_in_flight", method="Capture") == 0
    assert value(after, "jaxattn_requests_total", method="Capture", code="OK") == 0


def test_each_server_has_its_own_registry_and_the_token_refusals_count(svc_engine):
    with (
        running_server(svc_engine, metrics_port=0, token="s3cret") as (one, address),
        running_server(svc_engine, metrics_port=0) as (other, _),
    ):
        assert one.metrics_port != other.metrics_port
        with grpc.insecure_channel(address) as channel:
            with pytest.raises(grpc.RpcError) as denied:
                capture_bytes(channel, pb.CaptureRequest(texts=texts(1), what=WHAT))
        assert denied.value.code() == grpc.StatusCode.UNAUTHENTICATED
        code = dict(method="Capture", code="UNAUTHENTICATED")
        assert value(scrape(one), "jaxattn_requests_total", **code) == 1
        assert value(scrape(other), "jaxattn_requests_total", **code) == 0
    with pytest.raises(OSError):  # stopping the server stops its endpoint
        scrape(one)


def test_metrics_are_off_unless_a_port_is_given(svc_engine):
    with running_server(svc_engine) as (server, _):
        assert server.metrics_port is None


def test_a_bad_metrics_port_is_refused():
    from service import ServerOptions

    with pytest.raises(UsageError, match="metrics_port"):
        ServerOptions(metrics_port=70000)


def test_serve_checks_the_metrics_port_before_loading():
    from jaxattn.errors import UsageError
    from service.main import _check_metrics_port

    with pytest.raises(UsageError, match="--metrics-port 50999 is the gRPC --port too"):
        _check_metrics_port("127.0.0.1:50999", 50999)
    with socket.create_server(("127.0.0.1", 0)) as busy:
        taken = busy.getsockname()[1]
        with pytest.raises(UsageError, match=f"--metrics-port {taken} is in use"):
            _check_metrics_port("127.0.0.1:0", taken)


def test_a_methods_handler_is_wrapped_once_and_anew_when_it_changes():
    """The interceptor keeps a method's wrapper while the service hands it the same
    handler, wraps a new handler anew, and each wrapper counts its own method's calls."""
    import collections

    from service.metrics import ServerMetrics

    class Batcher:  # what the scrape reads
        admitted = pending = queue_size = buffered_bytes = reserved_bytes = total_bytes = 0
        stats = collections.Counter()

    class Context:
        def is_active(self):
            return True

        def code(self):
            return None

    class Details:
        def __init__(self, method):
            self.method = method

    metrics = ServerMetrics(None, Batcher(), max_batch_examples=MAX_BATCH)
    interceptor = metrics.interceptor()

    def handler(answer):
        return grpc.unary_unary_rpc_method_handler(lambda request, context: answer)

    one, two = handler("one"), handler("two")
    capture = "/jaxattn.v1.AttentionService/Capture"
    first = interceptor.intercept_service(lambda d: one, Details(capture))
    assert interceptor.intercept_service(lambda d: one, Details(capture)) is first
    changed = interceptor.intercept_service(lambda d: two, Details(capture))
    assert changed is not first
    info = interceptor.intercept_service(lambda d: one, Details("/x.Y/GetModelInfo"))
    assert interceptor.intercept_service(lambda d: None, Details("/x.Y/Nothing")) is None
    assert first.unary_unary(None, Context()) == "one"
    assert changed.unary_unary(None, Context()) == "two"
    assert changed.unary_unary(None, Context()) == "two"
    assert info.unary_unary(None, Context()) == "one"
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in metrics.registry.collect()
        for s in family.samples
    }
    assert value(samples, "jaxattn_requests_total", method="Capture", code="OK") == 3
    assert value(samples, "jaxattn_requests_total", method="GetModelInfo", code="OK") == 1
    assert value(samples, "jaxattn_requests_in_flight", method="Capture") == 0


def closed_by_peer(sock: socket.socket, within: float) -> bool:
    """Whether the other end closes `sock` within `within` seconds (no data comes)."""
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:  # closed with our unread bytes in its buffer
        return True
    except TimeoutError:
        return False


def test_idle_connections_to_the_metrics_port_hold_few_threads_and_are_closed(
    svc_engine, monkeypatch
):
    """Anyone who reaches the metrics port held a thread and a file descriptor of the
    server per connection, forever (prometheus_client's server has no timeout and no
    bound): enough idle connections and the gRPC port could accept no client."""
    import service.metrics
    from service.metrics import MAX_SCRAPES

    monkeypatch.setattr(service.metrics, "SCRAPE_IDLE_S", 0.5)
    with running_server(svc_engine, metrics_port=0) as (server, _):
        before = threading.active_count()
        idle = []
        for _ in range(3 * MAX_SCRAPES):  # half a request each, then silence
            sock = socket.create_connection(("127.0.0.1", server.metrics_port))
            sock.sendall(b"GET /metrics HTTP/1.1\r\n")
            idle.append(sock)
        try:
            time.sleep(0.2)
            assert threading.active_count() <= before + MAX_SCRAPES
            # those past the slots at once, the others once silent for SCRAPE_IDLE_S
            assert all(closed_by_peer(sock, within=5) for sock in idle)
            assert value(scrape(server), "jaxattn_queue_capacity") > 0  # scrapes go on
        finally:
            for sock in idle:
                sock.close()
