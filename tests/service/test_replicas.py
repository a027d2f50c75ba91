"""Many replicas, one client: a cut stream resumes elsewhere, exactly once, from one model.

Three in-process servers on port 0 share the session's tiny engine, each behind
a `CutEngine` that, when the shared plan says so, stops producing after k
examples; the test's receiving loop stops that server's gRPC server once its
k examples have arrived, so the cut falls at a known example without a sleep.
The subprocess test (SIGKILL under concurrent clients) is
tests/service/test_replicas_subprocess.py. docs/replicas.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import threading
from collections import Counter
from pathlib import Path

import grpc
import numpy as np
import pytest
from hf_fixtures import make_checkpoint
from service_support import SENTENCES, WHAT, running_server

from jaxattn.bench.expect import build_expectations, check_answer
from jaxattn.bench.load_generator import LoadRequest
from jaxattn.client import AttentionClient, AttentionServiceError
from jaxattn.client import client as client_module
from jaxattn.client.channels import SERVICE_CONFIG
from jaxattn.errors import UsageError
from jaxattn.netaddr import check_targets


@pytest.fixture(autouse=True)
def first_address_first(monkeypatch):
    """Every client's first call goes to its first address (a client starts at a random
    one, `channels.first_turn`): these tests name which replica answers which call."""
    from jaxattn.client import channels

    monkeypatch.setattr(channels, "first_turn", lambda n: 0)


TEXTS = list(SENTENCES[:7])


class CutEngine:
    """The real engine; a replica that takes a cut point k from `plan` (when it first
    runs) stops producing after k examples and waits for `release` (its server is
    stopped meanwhile). The server may run one call in several pieces: k counts
    examples over all of them."""

    def __init__(self, engine, plan: list[int]):
        self.engine = engine
        self.info = engine.info
        self.make_spec = engine.make_spec
        self.tokenize = engine.tokenize
        self.plan = plan  # shared by the replicas: the next one to run takes the next cut
        self.cut_at: int | None = None
        self.release = threading.Event()
        self.runs = self.produced = 0

    def run(self, tokenized, spec):
        """The engine's (position, Capture) items, in its order (not the input's); at the
        cut, only those before it, then a wait."""
        if not self.runs:
            self.cut_at = self.plan.pop(0) if self.plan else None
        self.runs += 1
        base, self.produced = self.produced, self.produced + len(tokenized)
        if self.cut_at is None or self.produced <= self.cut_at:
            yield from self.engine.run(tokenized, spec)
            return
        yield from [
            (pos, cap) for pos, cap in self.engine.run(tokenized, spec) if base + pos < self.cut_at
        ]
        self.release.wait(30)


class Replica:
    def __init__(self, server, address, engine):
        self.server, self.address, self.engine = server, address, engine

    def cut(self) -> None:
        """Stop serving at once (calls in flight cancelled), then let its engine go."""
        self.server.grpc_server.stop(0).wait(10)
        self.engine.release.set()


@contextlib.contextmanager
def replicas(engines):
    with contextlib.ExitStack() as stack:
        out = []
        for engine in engines:
            server, address = stack.enter_context(running_server(engine))
            stack.callback(engine.release.set)  # never leave a run waiting
            out.append(Replica(server, address, engine))
        yield out


def source(capture) -> str:
    return capture.provenance["source"].removeprefix("server ")


class Cutter:
    """Called with each capture as the client completes it: stops the replica that
    sent it once the examples its run was planned to cut after have all arrived."""

    def __init__(self, reps):
        self.by_address = {r.address: r for r in reps}
        self.count = Counter()

    def __call__(self, cap) -> None:
        replica = self.by_address[source(cap)]
        self.count[replica.address] += 1
        if replica.engine.cut_at == self.count[replica.address]:
            replica.cut()


def receive(stream, cutter: Cutter) -> list:
    got = []
    for cap in stream:
        got.append(cap)
        cutter(cap)
    return got


@pytest.fixture(scope="module")
def expected(svc_engine):
    """What each of TEXTS must be: the engine's float32 capture, bit for bit, at one of
    the batch sizes it may run it in (XLA's float32 differs in the last bits with
    the batch size, which a client of a micro-batching server cannot know; the load
    test checks the same way: jaxattn.bench.expect)."""
    request = LoadRequest("replicas", tuple(TEXTS), what=WHAT)
    (want,) = build_expectations(svc_engine, [request], max_batch=4)
    return want


def assert_right(got, expected):
    assert [c.text for c in got] == TEXTS  # each example once, in order
    assert check_answer(got, expected) is None, check_answer(got, expected)


def test_a_stream_cut_twice_resumes_on_the_others_every_example_once(svc_engine, expected):
    plan = [2, 3]  # the first run stops after 2 examples, the second after 3
    with replicas([CutEngine(svc_engine, plan) for _ in range(3)]) as reps:
        with AttentionClient([r.address for r in reps], timeout=60) as client:
            got = receive(client.stream(TEXTS, what=WHAT), Cutter(reps))
    assert_right(got, expected)
    sources = [source(c) for c in got]
    order = list(dict.fromkeys(sources))  # the replicas in the order they answered
    assert len(order) == 3 and [sources.count(a) for a in order] == [2, 3, len(TEXTS) - 5], sources


def test_capture_iter_resumes_a_cut_window(svc_engine, expected):
    plan = [4]
    with replicas([CutEngine(svc_engine, plan) for _ in range(3)]) as reps:
        with AttentionClient([r.address for r in reps], timeout=60) as client:
            stream = client.capture_iter(iter(TEXTS), what=WHAT, window=5)
            got = receive(stream, Cutter(reps))
    assert_right(got, expected)
    assert stream.done == len(TEXTS) and stream.skipped == []
    assert len({source(c) for c in got[:5]}) == 2  # the first window came from two


def test_capture_resumes_too(svc_engine, expected, monkeypatch):
    """capture() returns the whole list at the end: the cut is made from inside the
    client, as its decoder completes each example."""
    plan = [3]
    with replicas([CutEngine(svc_engine, plan) for _ in range(3)]) as reps:
        cutter = Cutter(reps)

        class Watched(client_module.StreamDecoder):
            def feed_all(self, message):
                caps = super().feed_all(message)
                for cap in caps:
                    cutter(cap)
                return caps

        monkeypatch.setattr(client_module, "StreamDecoder", Watched)
        with AttentionClient([r.address for r in reps], timeout=60) as client:
            got = client.capture(TEXTS, what=WHAT)
    assert_right(got, expected)
    sources = [source(c) for c in got]
    assert sources[:3] == [sources[0]] * 3 and set(sources[3:]) == {sources[3]} != {sources[0]}


@pytest.fixture(scope="module")
def other_engine(tmp_path_factory):
    """A second tiny BERT of the same shape, other weights (never run: loaded only)."""
    import jaxattn

    checkpoint = make_checkpoint("bert", tmp_path_factory.mktemp("other_bert"), seed=1)
    return jaxattn.load(checkpoint, buckets=(32,), max_batch=4)


def refused_after_two(svc_engine, other_engine, lie=None):
    """A stream cut after 2 examples by a replica of our model, its rest asked of a
    replica of another: (the error, examples received, the other engine, the replicas).
    `lie`: a stand-in for the client's GetModelInfo."""
    first, other = CutEngine(svc_engine, [2]), CutEngine(other_engine, [])
    with replicas([first, other]) as reps, contextlib.ExitStack() as patches:
        if lie is not None:
            patch = pytest.MonkeyPatch()
            patches.callback(patch.undo)
            patch.setattr(client_module.AttentionClient, "_replica", lie)
        got = []
        with AttentionClient([r.address for r in reps], timeout=60) as client:
            with pytest.raises(AttentionServiceError) as info:
                for cap in client.stream(TEXTS, what=WHAT):
                    got.append(cap)
                    if len(got) == 2:
                        reps[0].cut()
    ours, theirs = svc_engine.info.weights, other_engine.info.weights
    assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert ours in info.value.message and theirs in info.value.message, info.value.message
    assert info.value.address == reps[1].address and len(got) == 2
    return other


def test_a_replica_of_another_model_is_refused_naming_both_fingerprints(svc_engine, other_engine):
    ours, theirs = svc_engine.info.weights, other_engine.info.weights
    assert ours.startswith("blake2b:") and theirs.startswith("blake2b:") and ours != theirs
    other = refused_after_two(svc_engine, other_engine)
    assert other.runs == 0  # refused before the rest was asked of it


def test_the_rest_from_another_model_is_refused_even_where_its_model_info_lied(
    svc_engine, other_engine
):
    """Behind one address a balancer may send GetModelInfo to another replica than the
    capture: the rest's own call names its weights, and those are compared too."""
    real = client_module.AttentionClient._replica

    def answered_elsewhere(self, i, deadline, fresh=False):  # says our weights, always
        info = real(self, i, deadline, fresh)
        return dataclasses.replace(info, weights=svc_engine.info.weights)

    refused_after_two(svc_engine, other_engine, lie=answered_elsewhere)


def test_a_not_serving_replica_gets_no_calls(svc_engine):
    engines = [CutEngine(svc_engine, []) for _ in range(3)]
    with replicas(engines) as reps:
        reps[1].server.set_serving(False)  # as while it drains
        with AttentionClient([r.address for r in reps], timeout=60) as client:
            sources = [source(client.capture([t], what=WHAT)[0]) for t in TEXTS[:6]]
    assert engines[1].runs == 0 and reps[1].address not in sources
    assert set(sources) == {reps[0].address, reps[2].address}


def test_one_grpc_target_balances_over_its_replicas_skipping_a_not_serving_one(svc_engine):
    """gRPC's own resolver and round_robin: one ipv4: target naming three replicas."""
    assert json.loads(SERVICE_CONFIG)["loadBalancingConfig"] == [{"round_robin": {}}]
    engines = [CutEngine(svc_engine, []) for _ in range(3)]
    with replicas(engines) as reps:
        reps[2].server.set_serving(False)
        target = "ipv4:" + ",".join(r.address for r in reps)
        with AttentionClient(target, timeout=60) as client:
            for t in TEXTS[:6]:
                client.capture([t], what=WHAT)
    assert engines[0].runs and engines[1].runs and not engines[2].runs
    assert engines[0].runs + engines[1].runs == 6


def counting_model_asks(monkeypatch) -> list[int]:
    """The replicas the client sends GetModelInfo, in order."""
    asked, real = [], client_module.AttentionClient._replica

    def counting(self, i, deadline, fresh=False):
        if fresh or i not in self._replicas:
            asked.append(i)
        return real(self, i, deadline, fresh)

    monkeypatch.setattr(client_module.AttentionClient, "_replica", counting)
    return asked


def test_the_answering_model_is_named_by_the_call_not_asked_again(svc_engine, monkeypatch):
    """A Capture call's initial metadata names the answering model's weights: streams
    of several texts (which may need resuming) ask GetModelInfo once, not per call."""
    asked = counting_model_asks(monkeypatch)
    weights = svc_engine.info.weights
    with running_server(svc_engine) as (_, address), AttentionClient(address) as client:
        for _ in range(3):
            got = client.capture(TEXTS[:3], what=WHAT)
            assert [c.provenance["weights"] for c in got] == [weights] * 3
        assert asked == [0]
        # What the client knew of the replica is stale (it restarted with other
        # weights, or a balancer sent the call elsewhere): the call's name wins.
        client._replicas[0] = dataclasses.replace(client._replicas[0], weights="blake2b:old")
        assert client.capture(TEXTS[:2], what=WHAT)[0].provenance["weights"] == weights
        assert asked == [0, 0] and client._replicas[0].weights == weights


def test_a_dns_target_is_resolved_by_grpc(svc_engine, address):
    """dns:///localhost:PORT (localhost resolves from /etc/hosts: no network). One
    replica only: a name resolving to several replicas needs a DNS server."""
    port = address.rpartition(":")[2]
    with AttentionClient(f"dns:///localhost:{port}", timeout=60) as client:
        (cap,) = client.capture(TEXTS[:1], what=WHAT)
    assert cap.provenance["source"] == f"server dns:///localhost:{port}"


@pytest.mark.parametrize(
    "addresses, named",
    [
        (["127.0.0.1:50051", "127.0.0.1"], "'127.0.0.1' (entry 2 of 2) is not HOST:PORT"),
        (["127.0.0.1:50051", "host:0"], "'host:0' (entry 2 of 2) has port '0'"),
        (["dns:/name:1"], "'dns:/name:1' is not dns:///HOST:PORT"),
        (["http://name:1"], "scheme gRPC does not resolve (http:)"),
        (["::1:50051"], "an IPv6 address goes in brackets, [::1]:50051"),
        (["ipv4:127.0.0.1:1,name:2"], "has entry 'name:2' that has host 'name', not an IPv4"),
        (["ipv6:[127.0.0.1]:1"], "has host '127.0.0.1', not an IPv6 address"),
        (["[name]:1"], "has host 'name', not an IPv6 address"),
        (["a b:1"], "is empty or holds whitespace"),
        ([], "no server address"),
    ],
)
def test_a_bad_address_is_named_before_any_call(addresses, named):
    with pytest.raises(UsageError, match=re.escape(named)):
        AttentionClient(addresses)
    with pytest.raises(UsageError, match=re.escape(named)):
        check_targets(addresses)


def test_the_example_manifest_parses_and_serves_what_clients_dial():
    """Only its shape: no cluster runs here (docs/replicas.md says so)."""
    yaml = pytest.importorskip("yaml")
    path = Path(__file__).resolve().parents[2] / "docs" / "deploy" / "kubernetes.yaml"
    deployment, service = yaml.safe_load_all(path.read_text())
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"][0] == "serve" and "--port=50051" in container["args"]
    grace = next(a for a in container["args"] if a.startswith("--grace="))
    assert pod["terminationGracePeriodSeconds"] > int(grace.split("=")[1])
    probe = container["readinessProbe"]["exec"]["command"]
    assert "-service=jaxattn.v1.AttentionService" in probe
    assert service["spec"]["clusterIP"] == "None"  # headless: dns:/// sees every pod
    assert service["spec"]["ports"][0]["port"] == 50051


def test_own_connection_opens_a_connection_per_client_instead_of_sharing_one(served):
    """gRPC shares one TCP connection among a process's channels to one address: three
    clients are one connection (counted by a calm fault proxy in front of the server),
    unless each asks for its own (`own_connection=True`, what the load generator uses)."""
    from jaxattn.bench.fault_proxy import FaultProxy, Faults

    _, address = served
    for own, want in ((False, 1), (True, 3)):
        with FaultProxy(address, Faults()) as proxy:
            clients = [
                AttentionClient(proxy.address, timeout=30, own_connection=own) for _ in range(3)
            ]
            try:
                for client in clients:
                    assert client.capture(TEXTS[:1], what=WHAT)[0].tokens
                assert proxy.snapshot()["connections"] == want
            finally:
                for client in clients:
                    client.close()


def test_health_watches_hold_no_handler_thread(svc_engine):
    """Each client connection watches the server's health through one open Watch stream.
    Non-blocking on the server, they hold no handler thread: 8 connections to a server
    of 6 handler threads are all ready and a capture still runs (wrapped by the metrics'
    interceptor, each Watch held a thread and the 7th connection never became ready)."""
    with running_server(svc_engine, max_workers=6, queue_size=2) as (_, address):
        clients = [AttentionClient(address, timeout=30, own_connection=True) for _ in range(8)]
        try:
            for client in clients:
                client.wait_ready(10)
            assert clients[-1].capture(TEXTS[:1], what=WHAT)[0].tokens
        finally:
            for client in clients:
                client.close()


def test_a_stream_at_a_precision_newer_than_the_client_resumes_at_it(svc_engine, address):
    """A server newer than the client computes at a precision the client has no name for
    ("unknown (7)"); the stream is cut after its first example: the rest is asked at that
    precision, by its number (`Resume.request` looked the name up and raised KeyError
    out of the client)."""
    from local_server import fake_service

    from jaxattn.v1 import attention_pb2 as pb
    from jaxattn.wire import serialize_example

    texts = TEXTS[:3]
    with AttentionClient(address, timeout=60) as client:
        info = client.server_info()
    caps = svc_engine.capture(texts, what=("attention",))
    weights = svc_engine.info.weights

    def messages(first: int):  # examples first.. as a server at precision 7 sends them
        for k, cap in enumerate(caps[first:]):
            out = serialize_example(k, cap, codec="none", max_chunk_bytes=1 << 20, weights=weights)
            for m, message in enumerate(out):
                if m == 0:  # the header: at the precision this client does not know
                    parsed = pb.CaptureResponse.FromString(message)
                    parsed.header.precision = 7
                    message = parsed.SerializeToString()
                yield message

    asked = []

    def cut_after_one(request, context):
        asked.append(request.precision)
        yield from list(messages(0))[: 1 + len(caps[0].tensors)]  # header + one chunk each
        context.abort(grpc.StatusCode.UNAVAILABLE, "killed")

    def the_rest(request, context):
        asked.append(request.precision)
        assert [t.text for t in request.texts] == texts[1:]
        yield from messages(1)

    def model_info(request, context):
        return info

    with (
        fake_service(cut_after_one, model_info) as first,
        fake_service(the_rest, model_info) as second,
        AttentionClient([first, second], timeout=30, backoff=(0.01, 0.01)) as client,
    ):
        got = client.capture(texts, what=("attention",))
    assert asked == [pb.PRECISION_UNSPECIFIED, 7]
    assert [c.precision for c in got] == ["unknown (7)"] * 3
    assert [c.text for c in got] == texts
    for g, want in zip(got, caps, strict=True):
        assert g.tokens == want.tokens
        np.testing.assert_array_equal(g.attention, want.attention)
