"""A network that misbehaves: `jaxattn serve` in a namespace of its own, clients across loss.

The harness is `jaxattn.bench.fault_network` (two namespaces joined by a veth
pair, loss from nftables); the latency comes from `jaxattn.bench.fault_proxy`
(tested alone in test_rel_fault_proxy.py). Skipped, with the reason, where this
machine cannot make namespaces (not root, no `ip`/`tc`/`nft`). The long runs:
benchmarks/faulty_network.py (scripts/faulty_network.sh), figures in RELIABILITY.md.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from netfault_support import faulty_network, run_client, server_port, start_server
from rel_support import SENTENCES, WHAT

from jaxattn.bench.fault_network import FaultyNetwork, namespaces
from jaxattn.bench.fault_proxy import Faults, Leg


def test_the_namespaces_are_made_inside_and_removed_even_on_failure():
    before = namespaces()
    net = faulty_network()
    # A killed run's namespaces (its pid gone) are deleted by the next run.
    dead = max(int(p) for p in os.listdir("/proc") if p.isdigit()) + 1000
    while os.path.exists(f"/proc/{dead}"):
        dead += 1
    subprocess.run(["ip", "netns", "add", f"jxnf{dead}n0s"], check=True)
    assert f"jxnf{dead}n0s" in namespaces()
    FaultyNetwork().open().close()
    assert f"jxnf{dead}n0s" not in namespaces()
    with net:
        made = set(net.names.values())
        assert made <= set(namespaces()) and not made & set(before)
        addresses = net.run("client", ["ip", "-o", "-4", "addr"])
        assert f"inet {net.client_ip}/30" in addresses and "inet 127.0.0.1/8" in addresses
        net.set_loss(1.5)
        assert "numgen random mod 10000 < 150" in net.run("server", ["nft", "list", "ruleset"])
        net.set_rate("20mbit")
        assert "tbf" in net.run("server", ["tc", "qdisc", "show", "dev", net.links["server"]])
        sleeper = net.popen("server", [sys.executable, "-c", "import time; time.sleep(600)"])
    assert sleeper.poll() is not None  # stopped with its namespace
    left = namespaces()
    assert not made & set(left) and not [n for n in left if n.startswith(net.tag)]
    with pytest.raises(ZeroDivisionError), faulty_network() as failing:
        made = set(failing.names.values())
        raise ZeroDivisionError("a test failing inside the network")
    assert not made & set(namespaces())


def test_serve_across_loss_and_latency_answers_every_request_right(rel_checkpoint, tmp_path):
    import jaxattn
    from jaxattn.bench.expect import build_expectations
    from jaxattn.bench.load_generator import LoadRequest

    net = faulty_network()
    with net:
        server, lines = start_server(net, rel_checkpoint, tmp_path / "serve.log")
        # Meanwhile the right answers, from an engine as `jaxattn serve` loads it (default
        # buckets), one example per engine call (--max-batch 1): sentences of one bucket
        # (9-16 tokens), every codec. Its compile lands in the session's XLA cache, which
        # the server reads when the first request comes.
        reference = jaxattn.load(rel_checkpoint)
        texts = [s for s in SENTENCES if 8 < reference.tokenize([s])[0].length <= 16]
        mix = [
            LoadRequest("single", (t,), WHAT, dtype="float32", codec=c)
            for t in texts
            for c in ("none", "zstd", "lz4")
        ]
        expected = build_expectations(reference, mix, max_batch=1)
        port = server_port(net, lines, tmp_path / "serve.log")

        net.set_loss(2.0)
        plan = dict(
            server=f"{net.server_ip}:{port}",
            faults=Faults(up=Leg(0.004, 0.003), down=Leg(0.004, 0.003), seed=7),
            mix=mix,
            expected=expected,
            clients=4,
            requests=40,
        )
        report = run_client(net, plan, tmp_path, timeout=120)
        seen, dropped = net.packets()
        assert server.poll() is None, (tmp_path / "serve.log").read_text()
        server.kill()  # its graceful exit is tested elsewhere (test_service_subprocess.py)
    load, proxy = report["load"], report["proxy"]
    assert (load["requests"], load["ok"], load["wrong"], load["lost"]) == (40, 40, 0, 0), load
    assert load["errors"] == {}, load
    assert proxy["connections"] >= 1 and proxy["bytes_down"] > 0, proxy
    assert seen > 0 and dropped > 0, (seen, dropped)  # packets really were lost
