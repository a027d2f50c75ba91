"""Liveness is not readiness: a replica out of rotation (set not-serving, or draining)
still answers its liveness check, and fails its readiness check; the example manifest's
probes ask the service names the server sets.

A liveness probe that asked readiness (the manifest's, until this) would have kubelet
restart a replica for draining or for being taken out of rotation.
"""

from __future__ import annotations

import threading
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hf_fixtures import EXAMPLE_A
from service_support import WHAT, GatedEngine, running_server

from jaxattn.client import AttentionClient
from service.health import LIVENESS_SERVICE, HealthServicer
from service.server import SERVICE_NAME

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
MANIFEST = Path(__file__).resolve().parents[2] / "docs" / "deploy" / "kubernetes.yaml"


def statuses(address: str) -> dict[str, int]:
    """Each service name's status, as a probe (grpc_health_probe -service=NAME) asks it."""
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return {
            name: stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=10).status
            for name in ("", SERVICE_NAME, LIVENESS_SERVICE)
        }


def test_out_of_rotation_the_replica_is_alive_and_not_ready(svc_engine):
    with running_server(svc_engine) as (server, address):
        assert statuses(address) == {"": SERVING, SERVICE_NAME: SERVING, LIVENESS_SERVICE: SERVING}
        server.set_serving(False)
        assert statuses(address) == {
            "": NOT_SERVING,
            SERVICE_NAME: NOT_SERVING,
            LIVENESS_SERVICE: SERVING,
        }
        server.set_serving(True)
        assert statuses(address)[SERVICE_NAME] == SERVING


def test_while_it_drains_the_replica_is_alive_and_not_ready(svc_engine):
    """A call held in flight keeps the server draining (stop with a long grace) while the
    probes ask; released, the call finishes and the server stops."""
    engine = GatedEngine(svc_engine)
    engine.output_bytes, engine.buckets = svc_engine.output_bytes, svc_engine.buckets
    with running_server(engine) as (server, address):
        with AttentionClient(address, timeout=60, retries=0) as client:
            done: list = []
            call = threading.Thread(
                target=lambda: done.append(client.capture([EXAMPLE_A], what=WHAT))
            )
            call.start()
            try:
                assert engine.entered.wait(30)
                stopped = server.stop(grace=60)
                assert statuses(address) == {
                    "": NOT_SERVING,
                    SERVICE_NAME: NOT_SERVING,
                    LIVENESS_SERVICE: SERVING,
                }
                assert not stopped.is_set()  # still draining when the probes answered
            finally:
                engine.gate.set()
                call.join(60)
            assert done and done[0][0].tokens  # the call in flight finished
            assert stopped.wait(30)


def test_the_liveness_status_is_not_set():
    with pytest.raises(RuntimeError, match="SERVING while the server answers"):
        HealthServicer().set(LIVENESS_SERVICE, NOT_SERVING)


def test_the_manifests_probes_ask_liveness_and_readiness_apart():
    """Its liveness and startup probes ask LIVENESS_SERVICE, its readiness probe the
    attention service: the names the server sets, read from the code."""
    yaml = pytest.importorskip("yaml")
    deployment, _ = yaml.safe_load_all(MANIFEST.read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]

    def service(probe: str) -> str:
        (flag,) = [a for a in container[probe]["exec"]["command"] if a.startswith("-service=")]
        return flag.removeprefix("-service=")

    assert service("readinessProbe") == SERVICE_NAME
    assert service("livenessProbe") == LIVENESS_SERVICE
    assert service("startupProbe") == LIVENESS_SERVICE
