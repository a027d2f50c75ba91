"""benchmarks/service_scale.py's replicas case: its clients start spread over the
servers, and no client process outlives the run (no timing asserted: figures go to
BENCHMARKS.md)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections import Counter
from concurrent import futures
from pathlib import Path

import grpc

from jaxattn.client.channels import Channels

ROOT = Path(__file__).resolve().parent.parent


def scale_module():
    """benchmarks/service_scale.py as a module (it imports service_bench, beside it)."""
    spec = importlib.util.spec_from_file_location(
        "service_scale", ROOT / "benchmarks/service_scale.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_replicas_clients_first_calls_are_spread_over_the_servers(monkeypatch):
    """The benchmark's clients start at their list's first address (`clients_child`;
    a client's own first turn is random, which spreads 32 unevenly): with the same
    list, all 32 clients sent their warm-up to one server and their first timed call
    to the next, together (a convoy micro-batching servers keep together for a while).
    Rotated by the client's number, the first timed calls are spread evenly."""
    from jaxattn.client import channels

    monkeypatch.setattr(channels, "first_turn", lambda n: 0)  # as clients_child does
    scale = scale_module()
    servers = [grpc.server(futures.ThreadPoolExecutor(1)) for _ in range(3)]
    addresses = [f"127.0.0.1:{s.add_insecure_port('127.0.0.1:0')}" for s in servers]
    for server in servers:
        server.start()
    first = Counter()
    try:
        for client in range(32):
            mine = scale.client_addresses(addresses, client)
            assert sorted(mine) == sorted(addresses)
            channels = Channels(mine)
            try:
                channels.next()  # the warm-up call
                i, _ = channels.next()  # the first timed call
                first[mine[i]] += 1
            finally:
                channels.close()
    finally:
        for server in servers:
            server.stop(None)
    assert sorted(first.values()) == [10, 11, 11], first


def test_client_processes_are_ended_whatever_fails():
    scale = scale_module()
    children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])]
    scale._end_all(children)
    assert children[0].poll() is not None


def test_server_children_do_not_preallocate_the_device_the_parent_holds(monkeypatch):
    """The parent holds its own engine on the device while every server child runs (the
    e2e, replay and concurrent cases' one, the replicas'): a child preallocating 75 % of a
    GPU's memory beside the parent's 75 % could not start."""
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "true")  # the caller's: overridden
    env = scale_module().child_env()
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert env["JAXATTN_COMPILATION_CACHE"].endswith("jaxattn-bench-cache")


def test_a_clients_first_call_goes_to_a_random_address():
    """A client's round-robin starts at a random address (`channels.first_turn`), as
    gRPC's round_robin starts at a random backend: a fleet of clients started together
    does not send every first call to one replica. 60 clients of 3 addresses (nothing
    listening: the first turn is chosen before any call) start at each of them."""
    addresses = ["127.0.0.1:9", "127.0.0.1:10", "127.0.0.1:11"]
    first = Counter()
    for _ in range(60):
        channels = Channels(addresses)
        try:
            first[channels.next()[0]] += 1
        finally:
            channels.close()
    assert sorted(first) == [0, 1, 2], first  # one never first by chance: p ~ 3 (2/3)^60
