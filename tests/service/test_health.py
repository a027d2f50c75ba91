"""service.health: the grpc.health.v1 servicer that a watcher leaving mid-send cannot hang.

The send callbacks here stand in for gRPC's: a real send returns only once
gRPC's completion-queue thread reports it done, and that thread runs a closed
Watch call's callbacks first; `send` below does the same, on a thread of its own.
"""

from __future__ import annotations

import threading

import grpc
from grpc_health.v1 import health_pb2

from service.health import HealthServicer

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


class Context:
    def __init__(self):
        self.callbacks, self.code = [], None

    def add_callback(self, callback):
        self.callbacks.append(callback)
        return True

    def set_code(self, code):
        self.code = code

    def set_details(self, details):
        self.details = details


def status_of(response):
    return None if response is None else response.status


def watch(servicer, service, send):
    context = Context()
    servicer.Watch(health_pb2.HealthCheckRequest(service=service), context, send)
    return context


def test_a_watcher_leaving_during_a_send_does_not_hang_the_stop():
    servicer = HealthServicer()
    sent, left = [], []

    def send(response):
        if response is not None and sent:  # the second send: the client goes meanwhile
            closing = threading.Thread(target=context.callbacks[0])
            closing.start()
            closing.join(5)
            left.append(not closing.is_alive())
        sent.append(status_of(response))

    context = watch(servicer, "", send)
    stopping = threading.Thread(target=servicer.enter_graceful_shutdown)
    stopping.start()
    stopping.join(5)
    assert not stopping.is_alive() and left == [True]
    assert sent == [SERVING, None, NOT_SERVING]  # the close ended the call; the send went on


def test_watchers_hear_each_change_and_the_last_status_last():
    servicer = HealthServicer()
    heard = {name: [] for name in ("a", "b")}
    for log in heard.values():
        watch(servicer, "svc", lambda r, log=log: log.append(status_of(r)))
    servicer.set("svc", SERVING)
    threads = [
        threading.Thread(target=servicer.set, args=("svc", s)) for s in (NOT_SERVING, SERVING) * 5
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = servicer.Check(health_pb2.HealthCheckRequest(service="svc"), Context()).status
    for log in heard.values():
        assert log[0] == UNKNOWN and log[1] == SERVING and log[-1] == final


def test_check_and_shutdown():
    servicer = HealthServicer()
    context = Context()
    assert servicer.Check(health_pb2.HealthCheckRequest(service="x"), context).status == 0
    assert context.code == grpc.StatusCode.NOT_FOUND
    servicer.set("x", SERVING)
    servicer.enter_graceful_shutdown()
    servicer.set("x", SERVING)  # ignored from now on
    for name in ("", "x"):
        got = servicer.Check(health_pb2.HealthCheckRequest(service=name), Context())
        assert got.status == NOT_SERVING
    gone = []
    context = watch(servicer, "x", gone.append)
    context.callbacks[0]()  # the client went: the call ends, nothing more is sent to it
    servicer.enter_graceful_shutdown()
    assert [status_of(r) for r in gone] == [NOT_SERVING, None]


def test_a_watch_that_ended_leaves_nothing_behind_whatever_it_named():
    """Anyone may Watch (health takes no token), naming any service: each name stayed
    in the servicer after its call ended (100 cancelled watches of 3 MiB names held
    345 MiB of a server)."""
    import tracemalloc

    servicer = HealthServicer()
    heard = []
    watch(servicer, "", lambda response: heard.append(status_of(response)))  # it stays
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for k in range(200):
            context = watch(servicer, f"{k:03d}" + "x" * 250, lambda response: None)
            for callback in context.callbacks:  # the call ends: its client went
                callback()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 20_000, kept  # 200 names of 253 bytes: 50 kB (and their sets) if they stayed
    servicer.set("", NOT_SERVING)  # the watcher that stays still hears changes
    assert heard == [SERVING, NOT_SERVING]


def test_a_watch_of_a_longer_name_than_any_service_ends_at_once_and_keeps_nothing():
    """A Watch stays open, holding its name, as long as its client likes (no token
    needed): a name past MAX_SERVICE_NAME bytes, which no service of the server has, ends
    the call at once, INVALID_ARGUMENT naming the limit, and nothing of it is kept."""
    from service.health import MAX_SERVICE_NAME

    servicer = HealthServicer()
    for name, ends in (("x" * MAX_SERVICE_NAME, False), ("\u00e9" * 129, True)):
        sent = []
        context = watch(servicer, name, sent.append)
        if ends:
            assert sent == [None] and context.code == grpc.StatusCode.INVALID_ARGUMENT
            assert f"258 bytes: at most {MAX_SERVICE_NAME}" in context.details
            assert context.callbacks == [] and name not in servicer._watchers
        else:  # an unknown service of the longest name allowed: watched, SERVICE_UNKNOWN
            assert [status_of(r) for r in sent] == [health_pb2.HealthCheckResponse.SERVICE_UNKNOWN]
            assert context.code is None and name in servicer._watchers


def test_a_watch_whose_call_ended_before_its_handler_ran_keeps_nothing():
    """gRPC runs a Watch's handler on a pool thread: a client that left meanwhile (a busy
    server) has a call whose close callbacks already ran, so `add_callback` returns False
    and never calls this one; the watcher stayed for good (16 of 20 such Watches on a
    real server whose handler waited 100 ms)."""

    class Ended(Context):
        def add_callback(self, callback):
            return False  # grpc: "the RPC already terminated"

    servicer = HealthServicer()
    sent = []
    servicer.Watch(health_pb2.HealthCheckRequest(service="gone"), Ended(), sent.append)
    assert servicer._watchers == {}
    assert sent == [None]  # nothing sent but the end (a no-op on an ended call)
    servicer.set("gone", SERVING)
    assert sent == [None]
