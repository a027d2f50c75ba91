"""The grpc.health.v1 service: Check and a non-blocking Watch that cannot deadlock a stop.

grpcio-health-checking's `HealthServicer` (1.85) sends each watcher's response
while holding its lock, and a send waits for gRPC's completion-queue thread to
report it done; when a watching client goes away at that moment, the same
thread runs the Watch's close callback, which waits for that lock: the server
hangs in `enter_graceful_shutdown` (seen in this suite: a stop while eight
client connections closed; the upstream fix is open as grpc/grpc#43403). Here
the status table and the watchers are changed under one lock that is never held
across a send, and sends are serialised by another, which the close callback
never takes; each send says the service's status at the time it is made, so
concurrent updates end with every watcher told the last one.

Two questions an orchestrator asks (docs/deploy/kubernetes.yaml): readiness, "does
it take captures?", is the attention service's status (and the server's, ""), which
`AttentionServer.set_serving(False)` and a drain turn NOT_SERVING; liveness, "does
the process answer?", is LIVENESS_SERVICE's, SERVING for as long as the server answers
at all, draining or set not-serving included, so that a probe of it never restarts a
replica for being out of rotation. (A server warms up, `--warmup`, before it listens:
then neither answers, and a startup probe waits for it.)
"""

from __future__ import annotations

import threading

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN

# The health service name a liveness probe asks: SERVING while the server answers.
LIVENESS_SERVICE = "jaxattn.v1.Liveness"
# The longest service name a Watch may name (the server's own are under 40 bytes): a
# Watch, open to anyone (no token), holds its name for as long as it stays open, and
# gRPC would take names up to the server's whole receive limit (4 MiB by default).
MAX_SERVICE_NAME = 256


class HealthServicer(health_pb2_grpc.HealthServicer):
    """Statuses by service name ("" is the server's; LIVENESS_SERVICE always SERVING);
    Watch holds no handler thread."""

    def __init__(self):
        self._lock = threading.Lock()  # the statuses and the watchers; never held on a send
        self._send_lock = threading.Lock()  # one send at a time, in status order
        self._status: dict[str, int] = {"": _SERVING, LIVENESS_SERVICE: _SERVING}
        self._watchers: dict[str, set] = {}
        self._shutting_down = False

    def Check(self, request, context):  # noqa: N802 (gRPC method name)
        with self._lock:
            status = self._status.get(request.service)
        if status is None:
            context.set_code(grpc.StatusCode.NOT_FOUND)
            return health_pb2.HealthCheckResponse()
        return health_pb2.HealthCheckResponse(status=status)

    def Watch(self, request, context, send_response_callback=None):  # noqa: N802
        service = request.service
        if len(service.encode()) > MAX_SERVICE_NAME:  # no service of this server: not kept
            context.set_code(grpc.StatusCode.INVALID_ARGUMENT)
            context.set_details(
                f"a health service name of {len(service.encode())} bytes: at most "
                f"{MAX_SERVICE_NAME} are watched"
            )
            send_response_callback(None)  # ends the call with that status
            return
        with self._lock:
            self._watchers.setdefault(service, set()).add(send_response_callback)
        if not context.add_callback(lambda: self._forget(service, send_response_callback)):
            # The call ended before this handler ran (its client left while the Watch
            # waited for a thread): gRPC calls no callback of it, so it goes now.
            self._forget(service, send_response_callback)
            return
        self._send(service, [send_response_callback])

    # Non-blocking: gRPC passes send_response_callback and frees the handler thread.
    Watch.experimental_non_blocking = True
    Watch.experimental_thread_pool = None

    def set(self, service: str, status: int) -> None:
        """Set a service's status and tell its watchers (ignored once shutting down).

        Raises:
          RuntimeError: `service` is LIVENESS_SERVICE, whose status is not set (only
            a bug in the server sets it).
        """
        if service == LIVENESS_SERVICE:
            raise RuntimeError(f"{LIVENESS_SERVICE} is SERVING while the server answers: not set")
        with self._lock:
            if self._shutting_down:
                return
            self._status[service] = status
            watchers = list(self._watchers.get(service, ()))
        self._send(service, watchers)

    def enter_graceful_shutdown(self) -> None:
        """Every service but LIVENESS_SERVICE NOT_SERVING, for good: later `set` calls
        are ignored. The server still answers while its calls drain: alive."""
        with self._lock:
            if self._shutting_down:
                return
            self._shutting_down = True
            for service in self._status:
                if service != LIVENESS_SERVICE:
                    self._status[service] = _NOT_SERVING
            watched = {
                s: list(w)
                for s, w in self._watchers.items()
                if s in self._status and s != LIVENESS_SERVICE
            }
        for service, watchers in watched.items():
            self._send(service, watchers)

    def _send(self, service: str, watchers) -> None:
        with self._send_lock:
            with self._lock:
                status = self._status.get(service, _UNKNOWN)
                live = [w for w in watchers if w in self._watchers.get(service, ())]
            response = health_pb2.HealthCheckResponse(status=status)
            for send in live:
                send(response)  # returns once sent, or at once for a finished call

    def _forget(self, service: str, watcher) -> None:
        """The Watch call ended (its client went, or the server stopped)."""
        with self._lock:
            watchers = self._watchers.get(service, set())
            watchers.discard(watcher)
            if not watchers:  # the name goes too: a client names what it watches, and
                self._watchers.pop(service, None)  # anyone may watch (megabytes each)
        watcher(None)  # ends the call with OK where it is still open
