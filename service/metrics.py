"""Prometheus metrics of one server: what it was asked, refused, computed and sent.

    server, port = create_server(engine, "127.0.0.1:0", metrics_port=0)
    server.start()       # http://127.0.0.1:<server.metrics_port>/metrics answers scrapes

Every server has its own `CollectorRegistry` (`ServerMetrics.registry`), never
prometheus_client's global one, so several servers in one process (tests, an
embedding application) keep their counts apart; an application that serves its
own /metrics can expose `server.metrics.registry` there instead of a port. The
metrics, their labels and the alert to set on each: RELIABILITY.md, "Metrics".

The rest of the server does not know prometheus; it calls thin hooks:
  - `interceptor()`: the outermost gRPC interceptor (service/server.py): calls by
    method and status, in flight, their duration, and refusals (a
    RESOURCE_EXHAUSTED answer, by its `jaxattn-limit` trailer);
  - `batch`: the batcher's `on_batch` (service/micro_batching.py): examples,
    requests and seconds of each engine call;
  - `sending`: wraps a Capture call's serialised messages (service/servicer.py):
    bytes and examples sent by dtype and codec, seconds spent handing them to gRPC;
  - a collector read at scrape time: queue depth and buffers (the batcher's
    `admitted`, `pending`, `buffered_bytes`, `reserved_bytes`, `stats`) and
    compiles (the engine's `compiled_shapes`); and prometheus_client's process
    collector (process_resident_memory_bytes, ...).

Refusals carry a `client` label, "" unless `client_of` is set: a callable from a
call's invocation metadata to the client's name (a per-client quota names the
client its token belongs to). Refusals that gRPC itself answers before any
handler runs (a request over --max-request-mib, more calls than handler
threads) are not seen here.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import grpc
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    make_wsgi_app,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from jaxattn.wire.protowire import headers_in

log = logging.getLogger("jaxattn.service")

# Request durations: a health check (~1 ms) to a corpus-sized capture (minutes).
_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_FLUSH_BYTES = 16 << 20  # a long example's bytes show up at least this often
_FILL = (0.125, 0.25, 0.5, 0.75, 0.999, 1.0)  # 0.999: "not quite full" apart from full
# The /metrics endpoint answers at most this many connections at once (one thread
# each; a connection past them is closed at once) and closes one that sends nothing
# for SCRAPE_IDLE_S: prometheus_client's own server held a thread and a file
# descriptor of this process for every connection, forever, so idle connections of
# anyone who could reach the port ran the server out of descriptors (no gRPC client
# could connect). A scraper sends its request at once and is one connection.
MAX_SCRAPES = 8
SCRAPE_IDLE_S = 10.0
# What the hooks count: attribute -> (type, name, help, labels, histogram buckets).
METRICS = {
    "requests": (
        Counter,
        "jaxattn_requests",
        "gRPC calls answered, by method and status code",
        ("method", "code"),
        None,
    ),
    "in_flight": (
        Gauge,
        "jaxattn_requests_in_flight",
        "gRPC calls being handled now",
        ("method",),
        None,
    ),
    "duration": (
        Histogram,
        "jaxattn_request_duration_seconds",
        "gRPC call duration, from the handler's start to its last message",
        ("method",),
        "seconds",
    ),
    "refusals": (
        Counter,
        "jaxattn_refusals",
        "calls answered RESOURCE_EXHAUSTED, by the jaxattn-limit trailer and client",
        ("limit", "client"),
        None,
    ),
    "batch_examples": (
        Histogram,
        "jaxattn_batch_examples",
        "examples per engine call",
        (),
        "batch",
    ),
    "batch_requests": (
        Histogram,
        "jaxattn_batch_requests",
        "requests sharing one engine call (micro-batching)",
        (),
        "batch",
    ),
    "batch_fill": (
        Histogram,
        "jaxattn_batch_fill_ratio",
        "examples per engine call / max_batch_examples",
        (),
        "fill",
    ),
    "engine_seconds": (
        Histogram,
        "jaxattn_engine_seconds",
        "seconds of one engine call, from its start to its last example (compiles included)",
        (),
        "seconds",
    ),
    "send_seconds": (
        Histogram,
        "jaxattn_send_seconds",
        "seconds one Capture call spent handing its messages to gRPC (waiting for the client)",
        (),
        "seconds",
    ),
    "sent_bytes": (
        Counter,
        "jaxattn_sent_bytes",
        "serialised CaptureResponse bytes sent, by output dtype and requested codec",
        ("dtype", "codec"),
        None,
    ),
    "sent_examples": (
        Counter,
        "jaxattn_sent_examples",
        "examples sent whole, by output dtype and requested codec",
        ("dtype", "codec"),
        None,
    ),
}
# Read from the batcher at scrape time: key -> (metric, help).
GAUGES = {
    "admitted": (
        "jaxattn_queue_admitted",
        "calls holding an admission slot (queued, computing or streaming); "
        "at jaxattn_queue_capacity the next is refused",
    ),
    "pending": ("jaxattn_queue_pending", "admitted calls waiting for the engine"),
    "capacity": ("jaxattn_queue_capacity", "most calls admitted at once (--queue-size)"),
    "buffered": ("jaxattn_buffered_bytes", "result bytes computed and not yet sent"),
    "reserved": ("jaxattn_reserved_bytes", "result-buffer bytes reserved by admitted calls"),
    "buffer_capacity": (
        "jaxattn_buffer_capacity_bytes",
        "most result-buffer bytes all calls may reserve (--max-buffered-mib)",
    ),
}
# The batcher's `stats` exported as counters (it holds peaks too, which are not):
# dropped (a queued job whose client left or whose deadline passed), abandoned (an
# engine call stopped early: every job in it had gone), stalled (a slow reader cut off),
# preempted (a run suspended between layer groups stopped for another call's waiting
# reader, to restart later: `service.grouped_runs`).
BATCHER_EVENTS = (
    "dropped",
    "abandoned",
    "stalled",
    "preempted",
    "merged_generations",
    "joined_generations",
)


def _powers_of_two(top: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to `top`, and `top` itself."""
    out = [1 << k for k in range(top.bit_length()) if 1 << k < top]
    return (*out, top)


class ServerMetrics:
    """The metrics of one server, in a registry of their own.

    Args:
      engine: read at scrape time for `compiled_shapes` (absent: not exported).
      batcher: read at scrape time for queue depth and buffers (`MicroBatcher`).
      max_batch_examples: the batch-size limit (the fill's denominator).
      client_of: invocation metadata -> the client's name, for refusals (None: "").
    """

    def __init__(self, engine, batcher, *, max_batch_examples: int, client_of=None):
        # auto_describe: the registry learns a collector's names from its `collect`
        # (`_ScrapeTime`, the process collector), so neither needs a `describe`.
        self.registry = CollectorRegistry(auto_describe=True)
        self.client_of: Callable[[tuple], str] | None = client_of
        self.max_batch_examples = max_batch_examples
        r = self.registry
        scales = {"seconds": _SECONDS, "batch": _powers_of_two(max_batch_examples), "fill": _FILL}
        for attribute, (kind, name, doc, labels, scale) in METRICS.items():
            buckets = {} if scale is None else {"buckets": scales[scale]}
            setattr(self, attribute, kind(name, doc, labels, registry=r, **buckets))
        self._sent: dict[tuple[str, str], tuple] = {}  # `_sent_counters`
        r.register(_ScrapeTime(engine, batcher))
        ProcessCollector(registry=r)  # process_resident_memory_bytes, CPU seconds, open fds

    # -- gRPC calls ------------------------------------------------------------------

    def interceptor(self) -> grpc.ServerInterceptor:
        """The interceptor counting every call; put it first (outermost)."""
        return _Interceptor(self)

    def _client(self, context) -> str:
        if self.client_of is None:
            return ""
        try:
            return self.client_of(tuple(context.invocation_metadata() or ()))
        except Exception:  # a broken hook must not change the call's answer
            log.exception("metrics: client_of failed")
            return ""

    def _ended(self, method: _Method, context, code: grpc.StatusCode, start: float) -> None:
        method.in_flight.dec()
        method.requests(code).inc()
        method.duration.observe(time.perf_counter() - start)
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            trailers = dict(context.trailing_metadata() or ())
            self.refusals.labels(trailers.get("jaxattn-limit", ""), self._client(context)).inc()

    # -- the batcher's engine calls ------------------------------------------------------

    def batch(self, examples: int, requests: int, seconds: float) -> None:
        """One engine call ran `examples` of `requests` requests in `seconds`."""
        self.batch_examples.observe(examples)
        self.batch_requests.observe(requests)
        self.batch_fill.observe(examples / self.max_batch_examples)
        self.engine_seconds.observe(seconds)

    # -- a Capture call's messages ----------------------------------------------------

    def sending(self, messages: Iterator, dtype: str, codec: str) -> Iterator:
        """Yield `messages`, counting what gRPC took: bytes, examples whose every
        message went (an example starts with its header), seconds handing them over.
        Closing this closes `messages`."""
        sent, examples = self._sent_counters(dtype, codec)
        seconds, started, taken = 0.0, 0, 0  # started: headers sent; taken: bytes not counted
        try:
            for message in messages:
                # A header (one, or several in a coalesced message): the examples
                # before the last one it starts went whole once it went.
                headers = headers_in(message)
                if headers or taken >= _FLUSH_BYTES:  # bytes counted per example, not message
                    sent.inc(taken)
                    taken = 0
                t = time.perf_counter()
                yield message
                seconds += time.perf_counter() - t
                taken += len(message)
                if headers:
                    examples.inc(started + headers - 1 - max(0, started - 1))
                    started += headers
            if started:
                examples.inc()
        finally:
            sent.inc(taken)
            close = getattr(messages, "close", None)
            if close is not None:
                close()
            self.send_seconds.observe(seconds)

    def _sent_counters(self, dtype: str, codec: str) -> tuple:
        """The sent-bytes and sent-examples counters of (dtype, codec), looked up once."""
        pair = self._sent.get((dtype, codec))
        if pair is None:
            pair = self.sent_bytes.labels(dtype, codec), self.sent_examples.labels(dtype, codec)
            self._sent[dtype, codec] = pair
        return pair

    # -- the endpoint ------------------------------------------------------------------

    def serve(self, host: str, port: int):
        """Serve /metrics over plain HTTP on host:port (0: a free port), in a thread;
        returns the HTTP server (`server_port`, `shutdown()`).

        Raises:
          RuntimeError: it cannot listen there.
        """
        try:
            family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
            server = type("_Server", (_MetricsServer,), {"address_family": family})
            httpd = make_server(
                host, port, make_wsgi_app(self.registry), server, handler_class=_ScrapeHandler
            )
        except OSError as e:
            raise RuntimeError(f"cannot serve metrics on {host}:{port}: {e.strerror or e}") from e
        threading.Thread(target=httpd.serve_forever, name="jaxattn-metrics", daemon=True).start()
        return httpd


class _MetricsServer(WSGIServer):
    """/metrics over HTTP: a thread per connection, at most MAX_SCRAPES of them; one
    more is closed unanswered (the scraper tries again at its next interval)."""

    def server_activate(self) -> None:
        super().server_activate()
        self.slots = threading.BoundedSemaphore(MAX_SCRAPES)

    def process_request(self, request, client_address) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            threading.Thread(
                target=self._answer, args=(request, client_address), daemon=True
            ).start()
        except BaseException:
            self.slots.release()
            self.shutdown_request(request)
            raise

    def _answer(self, request, client_address) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # a peer that went quiet (timeout) or away: nothing to tell
            pass
        finally:
            self.shutdown_request(request)
            self.slots.release()


class _ScrapeHandler(WSGIRequestHandler):
    """Closes a connection silent for SCRAPE_IDLE_S; logs nothing (a scrape is no news)."""

    def setup(self) -> None:
        self.timeout = SCRAPE_IDLE_S  # read at the call: a test may lower it
        super().setup()

    def log_message(self, format, *args) -> None:
        pass


# (request streaming, response streaming) -> the handler's behaviour and its factory.
_KINDS = {
    (False, False): ("unary_unary", grpc.unary_unary_rpc_method_handler),
    (False, True): ("unary_stream", grpc.unary_stream_rpc_method_handler),
    (True, False): ("stream_unary", grpc.stream_unary_rpc_method_handler),
    (True, True): ("stream_stream", grpc.stream_stream_rpc_method_handler),
}


# Not wrapped, so not counted: the health service. Its Watch is non-blocking (a stream
# held open with no handler thread, one per client connection that watches health);
# a wrapper would turn it into a generator holding a thread for the connection's life.
UNCOUNTED = ("/grpc.health.v1.Health/",)


class _Interceptor(grpc.ServerInterceptor):
    """Wraps every method's handler to count its calls (`ServerMetrics._ended`).

    A method's handler is one object call after call (the service's table), so it
    is wrapped once and the wrapper kept (a handler that changes is wrapped anew):
    per call, the profile of many small calls showed the wrapping and the metrics'
    label lookups (issue 32, BENCHMARKS.md).
    """

    def __init__(self, metrics: ServerMetrics):
        self.metrics = metrics
        # full method name -> (its handler, that handler wrapped); methods with a
        # handler only, so as many entries as the server has methods.
        self._wrapped: dict[str, tuple] = {}

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        full = handler_call_details.method
        if handler is None or full.startswith(UNCOUNTED):
            return handler
        known = self._wrapped.get(full)
        if known is not None and known[0] is handler:
            return known[1]
        method = _Method(self.metrics, full.rsplit("/", 1)[-1])
        attribute, factory = _KINDS[handler.request_streaming, handler.response_streaming]
        wrap = _streaming if handler.response_streaming else _unary
        wrapped = factory(
            wrap(self.metrics, method, getattr(handler, attribute)),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
        self._wrapped[full] = (handler, wrapped)
        return wrapped


class _Method:
    """One method's metrics, their labels looked up once (`labels` takes a lock)."""

    def __init__(self, metrics: ServerMetrics, name: str):
        self.metrics, self.name = metrics, name
        self.in_flight = metrics.in_flight.labels(name)
        self.duration = metrics.duration.labels(name)
        self._requests: dict[grpc.StatusCode, object] = {}

    def requests(self, code: grpc.StatusCode):
        """The request counter of this method and `code`."""
        counter = self._requests.get(code)
        if counter is None:
            counter = self._requests[code] = self.metrics.requests.labels(self.name, code.name)
        return counter


def _finished(context) -> grpc.StatusCode:
    """The status of a call whose handler returned: what it set, OK, or its client left."""
    if not context.is_active():
        return _gone(context)
    return context.code() or grpc.StatusCode.OK


def _gone(context) -> grpc.StatusCode:
    """The status of a call its client left: its deadline passed, or it cancelled."""
    remaining = context.time_remaining()
    if remaining is not None and remaining <= 0:
        return grpc.StatusCode.DEADLINE_EXCEEDED
    return grpc.StatusCode.CANCELLED


class _Call:
    """One call counted: in flight from entry; on exit, ended with the status its
    client gets (what the handler set, OK, or the client left)."""

    def __init__(self, metrics: ServerMetrics, method: _Method, context):
        self.metrics, self.method, self.context = metrics, method, context

    def __enter__(self):
        self.start = time.perf_counter()
        self.method.in_flight.inc()

    def __exit__(self, kind, error, traceback) -> None:
        if kind is None:
            code = _finished(self.context)
        elif kind is GeneratorExit:  # gRPC dropped the stream: the client went away
            code = _gone(self.context)
        else:  # an abort sets the status; any other exception is UNKNOWN to the client
            code = self.context.code() or grpc.StatusCode.UNKNOWN
        self.metrics._ended(self.method, self.context, code, self.start)


def _unary(metrics: ServerMetrics, method: _Method, behaviour):
    def handle(request, context):
        with _Call(metrics, method, context):
            return behaviour(request, context)

    return handle


def _streaming(metrics: ServerMetrics, method: _Method, behaviour):
    def handle(request, context):
        with _Call(metrics, method, context):
            yield from behaviour(request, context)

    return handle


class _ScrapeTime:
    """What is read when Prometheus scrapes: queue depth, buffers, batcher events, compiles."""

    def __init__(self, engine, batcher):
        self.engine = engine
        self.batcher = batcher

    def collect(self):
        b = self.batcher
        values = {
            "admitted": b.admitted,
            "pending": b.pending,
            "capacity": b.queue_size,
            "buffered": b.buffered_bytes,
            "reserved": b.reserved_bytes,
            "buffer_capacity": b.total_bytes,
        }
        for key, (name, doc) in GAUGES.items():
            yield GaugeMetricFamily(name, doc, value=values[key])
        events = CounterMetricFamily(
            "jaxattn_batcher_events", "the batcher's events, by kind", labels=("event",)
        )
        for event in BATCHER_EVENTS:
            events.add_metric((event,), b.stats[event])
        yield events
        yield CounterMetricFamily(
            "jaxattn_generated_tokens",
            "tokens generated for requests that asked for a continuation (CaptureRequest.generate)",
            value=b.stats["generated_tokens"],
        )
        compiled = getattr(self.engine, "compiled_shapes", None)
        if isinstance(compiled, int):
            yield CounterMetricFamily(
                "jaxattn_compiled_shapes",
                "programs compiled by the engine (one per new spec and batch shape; warmup too)",
                value=compiled,
            )
