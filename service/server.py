"""`create_server`: the gRPC server as a library (the CLI's `serve` is a thin main).

    from service import create_server
    server, port = create_server(engine, "127.0.0.1:0", batch_window_s=0.002)
    server.start()
    ...
    server.stop(grace=10).wait()      # health NOT_SERVING, drain in-flight, stop

Serves jaxattn.v1.AttentionService, grpc.health.v1.Health and server
reflection, on one port, plaintext or TLS, with an optional bearer token or
a token file of clients with quotas (service/clients.py, service/quotas.py);
and, with `metrics_port`, Prometheus metrics on a second (`service.metrics`).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from jaxattn.errors import UsageError
from jaxattn.netaddr import check_listen_address
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import codecs
from service.auth import BearerTokenInterceptor, ClientInterceptor, client_name
from service.generation import joins_by_default
from service.health import HealthServicer
from service.metrics import ServerMetrics
from service.micro_batching import MicroBatcher
from service.options import ServerOptions
from service.requests import RequestParser
from service.servicer import AttentionServicer, handlers

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["AttentionService"].full_name
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class AttentionServer:
    """A started-or-not gRPC server with its batcher; what `create_server` returns.

    Attributes:
      grpc_server: the underlying `grpc.Server`.
      batcher: the micro-batcher (its `stats` count batches, jobs, drops).
      options: the ServerOptions in force.
      metrics: its `ServerMetrics` (`metrics.registry`: the Prometheus registry).
      metrics_port: the port serving /metrics, None without `options.metrics_port`.
    """

    def __init__(
        self, grpc_server, batcher: MicroBatcher, health_servicer, options, metrics, httpd=None
    ):
        self.grpc_server = grpc_server
        self.batcher = batcher
        self.options = options
        self.metrics = metrics
        self.metrics_port = None if httpd is None else httpd.server_port
        self._httpd = httpd
        self._health = health_servicer
        self._stopped: threading.Event | None = None

    def start(self) -> None:
        """Start the batcher, then serve."""
        self.batcher.start()
        self.grpc_server.start()

    def set_serving(self, serving: bool) -> None:
        """Set the grpc.health.v1 status (the server's and the attention service's):
        NOT_SERVING takes this replica out of clients' rotation (jaxattn.client
        and load balancers that check health send it no new calls) while it still
        answers the calls it gets; SERVING puts it back. `stop` sets NOT_SERVING
        for good. Liveness (`service.health.LIVENESS_SERVICE`) stays SERVING
        either way. docs/replicas.md."""
        status = health_pb2.HealthCheckResponse.SERVING if serving else _NOT_SERVING
        for name in ("", SERVICE_NAME):
            self._health.set(name, status)

    def stop(self, grace: float | None = None) -> threading.Event:
        """Drain and stop; returns an Event set once everything has stopped.

        Health turns NOT_SERVING at once; new calls get UNAVAILABLE; calls in
        flight get up to `grace` seconds (None: options.grace_s) to finish,
        then are cancelled; finally the batcher stops.

        Two phases, because gRPC's own stop answers CANCELLED (not UNAVAILABLE)
        to calls it has received but not yet handed to a handler
        (grpc/grpc#41785): first the batcher refuses new jobs, so new calls
        reach a handler and get an explicit UNAVAILABLE while in-flight ones
        finish; only then does the gRPC server stop, with what is left of the
        grace, leaving that race a window of milliseconds instead of the whole
        drain. Clients retry a CANCELLED they did not cause (jaxattn.client).
        """
        if self._stopped is not None:
            return self._stopped
        self._stopped = threading.Event()
        grace = self.options.grace_s if grace is None else grace
        end = time.monotonic() + grace
        self._health.enter_graceful_shutdown()

        def finish():
            self.batcher.drain(grace)
            self.grpc_server.stop(max(0.0, end - time.monotonic())).wait()
            self.batcher.close(timeout=5)
            if self._httpd is not None:
                self._httpd.shutdown()
                self._httpd.server_close()
            self._stopped.set()

        threading.Thread(target=finish, name="jaxattn-drain", daemon=True).start()
        return self._stopped

    def wait_for_termination(self, timeout: float | None = None) -> bool:
        return self.grpc_server.wait_for_termination(timeout)


# The fewest milliseconds between two pings a client may send while the server sends
# no data: a client pinging more often is struck, and after two strikes its connection
# is closed (GOAWAY "too_many_pings", every call on it UNAVAILABLE). gRPC's default is
# 5 minutes; jaxattn's client pings every 60 s (`jaxattn.client.channels.KEEPALIVE`)
# during a long capture or while it watches the server's health. The argument's name
# is gRPC core's GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS; a misspelt
# channel argument is ignored without a word (tests/service/test_keepalive.py).
PING_INTERVAL_ARG = "grpc.http2.min_ping_interval_without_data_ms"
MIN_PING_INTERVAL_MS = 30_000


def _grpc_options(options: ServerOptions) -> list[tuple[str, int]]:
    return [
        # Every incoming message and its metadata is bounded before it is parsed.
        ("grpc.max_receive_message_length", options.max_request_bytes),
        ("grpc.max_metadata_size", options.max_metadata_bytes),
        ("grpc.absolute_max_metadata_size", options.max_metadata_bytes),
        ("grpc.max_send_message_length", codecs.MAX_MAX_CHUNK_BYTES + (1 << 20)),
        ("grpc.so_reuseport", 0),  # a second server on a used port must fail, not share
        # A connection that never finishes its handshake is closed.
        ("grpc.server_handshake_timeout_ms", 20_000),
        # Ping idle connections so calls of vanished clients are cancelled and
        # free their slots; accept the client's keepalive pings (every 60 s)
        # even while a long capture sends no data.
        ("grpc.keepalive_time_ms", 120_000),
        ("grpc.keepalive_timeout_ms", 20_000),
        (PING_INTERVAL_ARG, MIN_PING_INTERVAL_MS),
    ]


def components(engine, options: ServerOptions) -> tuple[MicroBatcher, RequestParser]:
    """The batcher (not started) and the request parser `create_server` serves `engine`
    with under `options` (also for measuring the servicer without gRPC:
    benchmarks/send_drain.py)."""
    batcher = MicroBatcher(
        engine,
        queue_size=options.queue_size,
        window_s=options.batch_window_s,
        max_batch_examples=options.max_batch_examples,
        merge=options.micro_batching,
        join=(
            joins_by_default(engine)
            if options.join_generations is None
            else options.join_generations
        ),
        buffer_bytes=options.request_buffer_bytes,
        total_bytes=options.max_buffered_bytes,
        stall_s=options.slow_reader_s,
    )
    parser = RequestParser(
        engine,
        max_texts=options.max_texts,
        max_tokens=options.max_tokens,
        max_request_bytes=options.max_request_bytes,
        max_metadata_bytes=options.max_metadata_bytes,
        max_example_bytes=options.max_example_bytes,
        max_buffered_bytes=options.max_buffered_bytes,
        max_result_bytes=options.max_result_bytes,
        max_new_tokens=options.max_new_tokens,
    )
    if hasattr(engine, "part_bytes"):
        # An example over the per-example limit runs in layer groups within it, each
        # sent as it lands (`jaxattn.engine.layer_groups`, service/limits.py).
        batcher.group_bytes = parser.limits.example_bytes or None
    return batcher, parser


def create_server(
    engine,
    address: str = "127.0.0.1:50051",
    *,
    options: ServerOptions | None = None,
    **overrides,
) -> tuple[AttentionServer, int]:
    """Build (but do not start) a server for `engine` bound to `address`.

    Args:
      engine: a loaded `jaxattn.Engine` (or anything with its info, make_spec,
        tokenize and run).
      address: "host:port"; port 0 picks a free port. Defaults to loopback
        only: serving beyond the machine is a choice (use TLS and a token).
      options: ServerOptions; keyword overrides replace its fields.

    Returns:
      (server, port): call server.start(), later server.stop(grace).

    Raises:
      RuntimeError: the address cannot be bound.
      UsageError: bad options.
    """
    options = dataclasses.replace(options or ServerOptions(), **overrides)
    batcher, parser = components(engine, options)
    metrics = ServerMetrics(engine, batcher, max_batch_examples=options.max_batch_examples)
    batcher.on_batch = metrics.batch
    # The metrics' interceptor first: it sees every call, those the token refuses too.
    interceptors = [metrics.interceptor()]
    if options.clients is not None:
        metrics.client_of = functools.partial(client_name, options.clients)
        interceptors.append(ClientInterceptor(options.clients))
    elif options.token:
        interceptors.append(BearerTokenInterceptor(options.token))
    server = grpc.server(
        futures.ThreadPoolExecutor(options.workers, thread_name_prefix="jaxattn-rpc"),
        interceptors=interceptors,
        # Past this many calls gRPC answers RESOURCE_EXHAUSTED itself, so no
        # call ever waits unboundedly for a handler thread.
        maximum_concurrent_rpcs=options.workers,
        options=_grpc_options(options),
    )
    # Captures may take all handler threads but a few (up to 4, half the spare ones):
    # those stay free for health checks and GetModelInfo.
    reserve = min(4, max(1, (options.workers - options.queue_size) // 2))
    servicer = AttentionServicer(
        engine, batcher, parser, max(1, options.workers - reserve), metrics=metrics
    )
    server.add_generic_rpc_handlers((handlers(servicer),))
    health_servicer = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    port = _add_port(server, address, options)
    if port == 0:
        check_listen_address(address)  # say why, naming --host/--port
        check_tls(options)
        raise RuntimeError(f"cannot listen on {address}")
    httpd = None
    if options.metrics_port is not None:
        try:
            httpd = metrics.serve(address.rsplit(":", 1)[0].strip("[]"), options.metrics_port)
        except RuntimeError:
            server.stop(None)
            raise
    return AttentionServer(server, batcher, health_servicer, options, metrics, httpd), port


def _add_port(server: grpc.Server, address: str, options: ServerOptions) -> int:
    """`server`'s port on `address`, TLS where `options` say; 0 where gRPC cannot add it
    (it cannot bind, or cannot make TLS credentials of the certificate and key)."""
    try:
        if options.tls_cert is not None:
            credentials = grpc.ssl_server_credentials([(options.tls_key, options.tls_cert)])
            return server.add_secure_port(address, credentials)
        return server.add_insecure_port(address)
    except RuntimeError:  # grpc's "Failed to bind" (older grpc returns 0 instead)
        return 0


def check_tls(options: ServerOptions) -> None:
    """UsageError unless gRPC can serve TLS with `options`' certificate and key (a
    file that is not PEM, the two swapped, or a key that is not the certificate's was
    an internal "cannot listen" error, after the model had loaded): tried on a
    throwaway server on a free loopback port, before the slow load."""
    if options.tls_cert is None:
        return
    probe = grpc.server(futures.ThreadPoolExecutor(1))
    try:
        port = _add_port(probe, "127.0.0.1:0", options)
    finally:
        probe.stop(None)
    if port == 0:
        raise UsageError(
            "--tls-cert/--tls-key: gRPC cannot serve TLS with them: give the PEM "
            "certificate chain as --tls-cert and its own PEM private key as --tls-key"
        )
