"""A client's keepalive pings are welcome: the server's ping policy is the one it sets.

A connection whose client pings more often than the server allows while no data
flows is closed after two strikes (GOAWAY "too_many_pings", its calls UNAVAILABLE).
The server allows `service.server.MIN_PING_INTERVAL_MS`; the soak's idle clients met
GOAWAYs while the server's option had a name gRPC does not know (silently ignored:
gRPC's 5-minute default applied to the client's 60-second pings). Here a client
pings every 0.3 s on a health watch that sends nothing after its first answer, with
the server's interval shortened to match, then left at its default.
"""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from local_server import running_server

import service.server

PINGING = [
    ("grpc.keepalive_time_ms", 300),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]


def watch_for(address: str, seconds: float):
    """Watch the server's health over a channel that pings every 0.3 s; the call's
    status code if it ended within `seconds`, else None (still open)."""
    channel = grpc.insecure_channel(address, options=PINGING)
    calls = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=""))
    ended = {}

    def read():
        try:
            for _ in calls:
                pass
        except grpc.RpcError as e:
            ended["code"], ended["details"] = e.code(), e.details()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(seconds)
    result = ended.get("code"), ended.get("details", "")
    calls.cancel()
    channel.close()
    return result


@pytest.mark.parametrize("interval_ms, closed", [(100, False), (None, True)])
def test_pings_at_the_allowed_rate_keep_the_connection(
    svc_engine, monkeypatch, interval_ms, closed
):
    if interval_ms is not None:
        monkeypatch.setattr(service.server, "MIN_PING_INTERVAL_MS", interval_ms)
    with running_server(svc_engine) as (_, address):
        started = time.monotonic()
        code, details = watch_for(address, 4.0)
    if closed:  # the default (30 s) against pings every 0.3 s: the policy is enforced
        assert code == grpc.StatusCode.UNAVAILABLE, (code, details)
        assert time.monotonic() - started < 4.5
    else:
        assert code is None, f"the connection was closed: {code} {details}"
