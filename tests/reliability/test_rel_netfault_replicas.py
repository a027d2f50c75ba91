"""Replicas across a faulty network: two `jaxattn serve` in the server namespace, clients of both.

The small form of benchmarks/faulty_network.py --replicas (RELIABILITY.md, "Under a
faulty network"): each replica behind a fault proxy of its own (latency, and resets
after a few tens of kB per connection), 2 % TCP loss on the veth pair, and 4 clients
each with its own connections to both. Requests of one sentence, streams of six
(cut by a reset, they resume on the other replica from the first example not
received) and streams the client cancels after two examples. Skipped, with the
reason, where this machine cannot make namespaces.
"""

from __future__ import annotations

import json

from netfault_support import faulty_network, run_client, server_port, start_server
from rel_support import SENTENCES, WHAT

from jaxattn.bench.fault_proxy import Faults, Leg

REQUESTS = 60


def test_two_replicas_across_loss_latency_and_resets_answer_every_request_right(
    rel_checkpoint, tmp_path
):
    import jaxattn
    from jaxattn.bench.expect import build_expectations
    from jaxattn.bench.load_generator import LoadRequest

    net = faulty_network()
    with net:
        logs = [tmp_path / f"serve-{k}.log" for k in range(2)]
        servers = [start_server(net, rel_checkpoint, log) for log in logs]
        # Meanwhile the right answers, from an engine loaded as `jaxattn serve` loads it,
        # one example per engine call (both servers run --max-batch 1).
        reference = jaxattn.load(rel_checkpoint)
        texts = [s for s in SENTENCES if 8 < reference.tokenize([s])[0].length <= 16]
        assert len(texts) >= 3, "the tiny vocabulary's sentences changed"
        mix = [
            LoadRequest("single", (t,), WHAT, dtype=d, codec=c)
            for t in texts[:3]
            for d, c in (("float32", "none"), ("float32", "zstd"), ("uint8", "lz4"))
        ]
        mix += [
            LoadRequest("stream", tuple(texts) * 2, WHAT, codec="lz4", weight=3.0),
            LoadRequest("cancel", tuple(texts) * 2, WHAT, cancel_after=2, weight=1.0),
        ]
        expected = build_expectations(reference, mix, max_batch=1)
        ports = [
            server_port(net, lines, log) for (_, lines), log in zip(servers, logs, strict=True)
        ]

        net.set_loss(2.0)
        plan = dict(
            servers=[f"{net.server_ip}:{port}" for port in ports],
            faults=Faults(
                up=Leg(0.003, 0.002),
                down=Leg(0.003, 0.002),
                reset_after=(20_000, 60_000),  # a few per connection over the run
                seed=11,
            ),
            mix=mix,
            expected=expected,
            clients=4,
            requests=REQUESTS,
        )
        report = run_client(net, plan, tmp_path)
        seen, dropped = net.packets()
        for (server, _), log in zip(servers, logs, strict=True):
            assert server.poll() is None, log.read_text()
            server.kill()  # its graceful exit is tested elsewhere
    load, proxy = report["load"], report["proxy"]
    # Every request answered right (the cancelled ones: the two examples read before the
    # cancel), none lost, no error: the resets were retried or resumed, never surfaced.
    assert (load["requests"], load["ok"], load["wrong"], load["lost"]) == (
        REQUESTS,
        REQUESTS,
        0,
        0,
    ), json.dumps(load)
    assert load["errors"] == {} and load["undesigned"] == {}, load
    assert load["cancelled"] >= 1 and load["by_kind"]["stream"]["n"] >= 1, load
    assert proxy["resets"] >= 1, proxy  # the faults really happened
    assert seen > 0 and dropped > 0, (seen, dropped)
    # Both replicas answered: each logged Capture calls.
    for log in logs:
        assert " Capture peer=" in log.read_text(), log.read_text()
