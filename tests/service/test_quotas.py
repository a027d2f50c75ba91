"""Clients and quotas: the token file, token buckets, refusals through gRPC, fair turns.

Quota clocks are fake (advanced by hand), so nothing here sleeps or times
anything; fairness is asserted by the order a fake engine serves requests in.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import os
import signal
import threading
import time

import grpc
import pytest
from hf_fixtures import EXAMPLE_A
from service_support import WHAT, GatedEngine, running_server

from jaxattn.client import AttentionClient, AttentionServiceError
from jaxattn.errors import InputError, UsageError
from service.clients import ClientTable, Limits, parse_clients, token_digest
from service.micro_batching import MicroBatcher
from service.quotas import MAX_RETRY_AFTER_S, ClientQuota, QuotaExceeded, TokenBucket

EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED
_MiB = 1 << 20


class FakeClock:
    def __init__(self, t: float = 100.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


# -- the token file ------------------------------------------------------------------

GOOD = f"""\
# two clients
[clients.alice]
token = "alice-secret-token"
requests_per_s = 20
tokens_per_s = 5000.5
concurrent_calls = 4
result_mib = 1024
result_mib_per_s = 200
burst_s = 2
expires = 2027-01-01T00:00:00+01:00

[clients."bob.b"]
token_sha256 = "{hashlib.sha256(b"bob-secret-token").hexdigest()}"
"""


def test_a_good_token_file_gives_each_client_its_token_digest_and_limits():
    alice, bob = parse_clients(GOOD)
    assert (alice.name, bob.name) == ("alice", "bob.b")
    assert alice.digest == hashlib.sha256(b"alice-secret-token").digest()
    assert bob.digest == token_digest("bob-secret-token")
    assert alice.limits == Limits(
        requests_per_s=20,
        tokens_per_s=5000.5,
        concurrent_calls=4,
        result_mib=1024,
        result_mib_per_s=200,
        burst_s=2,
    )
    assert alice.expires == datetime.datetime(2026, 12, 31, 23, tzinfo=datetime.UTC)
    assert bob.limits == Limits() and bob.expires is None


def test_a_token_file_excludes_a_single_token(tmp_path):
    from service import ServerOptions

    path = tmp_path / "clients.toml"
    path.write_text(GOOD)
    table = ClientTable(path)
    assert table.names == ("alice", "bob.b")
    with pytest.raises(UsageError, match="not both"):
        ServerOptions(token="t", clients=table)


def test_a_token_file_saved_with_a_byte_order_mark_and_crlf_reads_as_without(tmp_path):
    """Notepad's UTF-8 (a BOM, CRLF line ends) was refused: "clients.toml:1: not valid
    TOML: Invalid statement". A BOM-prefixed --token-file token was likewise no token
    a client could send ("its character 1 of 13 is not ASCII")."""
    from jaxattn.cli.args import read_token

    path = tmp_path / "clients.toml"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD.replace("\n", "\r\n").encode())
    assert ClientTable(path).names == ("alice", "bob.b")
    assert parse_clients(path.read_text(encoding="utf-8")) == parse_clients(GOOD)
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"\xef\xbb\xbf[clients.a]\r\ntoken = 3\r\n")
    with pytest.raises(InputError, match=r"bad.toml:2: \[clients.a\] token: expected"):
        ClientTable(bad)  # lines counted as without it
    single = tmp_path / "token"
    single.write_bytes(b"\xef\xbb\xbfs3cret-token\r\n")
    assert read_token(str(single)) == "s3cret-token"


def test_every_clients_digest_is_compared_in_constant_time(tmp_path, monkeypatch):
    import service.clients

    path = tmp_path / "clients.toml"
    path.write_text(GOOD)
    table = ClientTable(path, now=lambda: 0.0)
    calls, real = [], service.clients.hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(service.clients.hmac, "compare_digest", spy)
    for token, name in (("alice-secret-token", "alice"), ("bob-secret-token", "bob.b")):
        quota, why = table.lookup(token)
        assert (quota.name, why) == (name, "")
    assert table.lookup("nobody") == (None, "")
    assert len(calls) == 3 * 2  # every client, whoever matched first
    assert {a for a, _ in calls} == {
        token_digest(t) for t in ("alice-secret-token", "bob-secret-token", "nobody")
    }


SHA = "0" * 64
A = '[clients.a]\ntoken = "x"\n'  # a good client; the rows add one bad line (line 3)
BAD_FILES = {
    "toml syntax": (A + "requests_per_s = = 3\n", 3, "not valid TOML"),
    "unterminated string": ('[clients.a]\ntoken = "x\n', 2, "not valid TOML"),
    "no clients": ("# nothing\n", None, "no clients"),
    "clients not a table": ('clients = "alice"\n', None, "no clients"),
    "top-level key": ("port = 1\n" + A, 1, "unknown top-level key 'port'"),
    "bad name": ('[clients."a b"]\ntoken = "x"\n', 1, "[clients.a b]: a client name"),
    "client not a table": ("[clients]\na = 3\n", None, "[clients.a]: expected a table"),
    "unknown field": (A + "request_per_s = 3\n", 3, "[clients.a] request_per_s: unknown field"),
    "no token": ("[clients.a]\nrequests_per_s = 3\n", 1, "exactly one of token and token_sha256"),
    "both tokens": (A + f'token_sha256 = "{SHA}"\n', 1, "exactly one of token"),
    "empty token": ('[clients.a]\ntoken = ""\n', 2, "[clients.a] token: expected a non-empty"),
    "token not a string": ("[clients.a]\ntoken = 12\n", 2, "[clients.a] token: expected"),
    "bad digest": ('[clients.a]\ntoken_sha256 = "abc"\n', 2, "token_sha256: expected 64"),
    "expires without offset": (
        A + "expires = 2027-01-01T00:00:00\n",
        3,
        "[clients.a] expires: expected a date and time with its offset",
    ),
    "expires a date": (A + "expires = 2027-01-01\n", 3, "expires: expected a date and time"),
    "negative rate": (
        A + "tokens_per_s = -1\n",
        3,
        "[clients.a] tokens_per_s: expected a number > 0 (leave it out for no limit), got -1",
    ),
    "zero rate": (A + "requests_per_s = 0\n", 3, "requests_per_s"),
    "infinite rate": (A + "result_mib_per_s = inf\n", 3, "got inf"),
    "rate a string": (A + 'result_mib = "1G"\n', 3, "got '1G'"),
    "fractional calls": (
        A + "concurrent_calls = 1.5\n",
        3,
        "[clients.a] concurrent_calls: expected an integer >= 1",
    ),
    "boolean calls": (A + "concurrent_calls = true\n", 3, "got True"),
    "shared token": (A + '\n[clients.b]\ntoken = "x"\n', 5, "[clients.b]: the same token as"),
    "shared token by digest": (
        A + f'[clients.b]\ntoken_sha256 = "{token_digest("x").hex()}"\n',
        4,
        "the same token",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_malformed_token_file_is_refused_naming_its_line_and_field(case):
    text, line, words = BAD_FILES[case]
    with pytest.raises(InputError) as info:
        parse_clients(text, "clients.toml")
    message = str(info.value)
    assert info.value.line == line, message
    assert message.startswith(f"clients.toml:{line}: " if line else "clients.toml: "), message
    assert words in message
    assert "\n" not in message and '"x"' not in message  # one line, no token in it


# -- token buckets and one client's quota ----------------------------------------------


def test_token_bucket_refills_at_its_rate_up_to_its_capacity_and_runs_into_debt():
    clock = FakeClock()
    bucket = TokenBucket(rate=2.0, capacity=4.0, clock=clock)
    assert bucket.wait(4) == 0.0
    bucket.take(3)
    assert bucket.wait(1) == 0.0 and bucket.wait(2) == pytest.approx(0.5)  # 1 left, 2/s
    clock.t += 10  # refills to the capacity, no further
    assert bucket.level == 1 and bucket.wait(4) == 0.0 and bucket.level == 4
    bucket.take(10)  # larger than the bucket: allowed when full, leaves it in debt
    assert bucket.level == -6
    assert bucket.wait(1) == pytest.approx(3.5)  # back to 1 token at 2/s
    assert bucket.wait(100) == pytest.approx(5.0)  # a big one waits for a full bucket only
    with pytest.raises(UsageError, match="rate and capacity must be > 0, got 0 and 1"):
        TokenBucket(rate=0, capacity=1)


def refusal(call) -> QuotaExceeded:
    with pytest.raises(QuotaExceeded) as info:
        call()
    return info.value


def test_each_rate_limit_refuses_with_its_name_and_when_to_retry_and_takes_nothing():
    clock = FakeClock()
    limits = Limits(requests_per_s=2, tokens_per_s=100, result_mib_per_s=10, burst_s=1)
    quota = ClientQuota("alice", limits, clock)
    quota.enter(), quota.enter()
    e = refusal(quota.enter)
    assert (e.limit, e.retry_after_s, e.client) == ("requests_per_s", pytest.approx(0.5), "alice")
    assert dict(e.trailers()) == {"jaxattn-limit": "requests_per_s", "retry-after-ms": "500"}
    assert e.code == EXHAUSTED and "retry after 0.5 s" in e.message and "alice" in e.message
    quota.charge(60, 2 * _MiB)
    e = refusal(lambda: quota.charge(50, 1 * _MiB))  # 40 tokens left, 100/s
    assert (e.limit, e.retry_after_s) == ("tokens_per_s", pytest.approx(0.1))
    assert "tokens_per_s quota (100 tokens/s; this request needs 50)" in e.message
    e = refusal(lambda: quota.charge(10, 9 * _MiB))  # 8 MiB left, 10/s: MiB refused ...
    assert (e.limit, e.retry_after_s) == ("result_mib_per_s", pytest.approx(0.1))
    clock.t += 0.05
    e = refusal(lambda: quota.charge(55, 9 * _MiB))  # 45 tokens, 8.5 MiB: the longer wait
    assert (e.limit, e.retry_after_s) == ("tokens_per_s", pytest.approx(0.1))
    clock.t += 0.1
    quota.charge(55, 9 * _MiB)  # nothing was taken by the refusals: both fit now
    assert quota.refused == {"requests_per_s": 1, "tokens_per_s": 2, "result_mib_per_s": 1}


def test_result_mib_and_concurrent_calls_refuse_without_a_retry_time():
    quota = ClientQuota("bob", Limits(result_mib=2, concurrent_calls=2), FakeClock())
    quota.charge(10**9, 2 * _MiB)  # no rate: any number of tokens
    e = refusal(lambda: quota.charge(1, 2 * _MiB + 1))
    assert (e.limit, e.retry_after_s) == ("result_mib", None)
    assert dict(e.trailers()) == {"jaxattn-limit": "result_mib"}
    assert "returns 2.0 MiB; client bob may receive at most 2 MiB per request" in e.message
    quota.enter(), quota.enter()
    e = refusal(quota.enter)
    assert (e.limit, e.retry_after_s) == ("concurrent_calls", None)
    quota.leave()
    quota.enter()
    assert quota.active == 2


def test_a_reload_that_changes_a_clients_limits_keeps_counting_its_calls_in_progress(
    tmp_path,
):
    """A call in progress across a SIGHUP that changed its client's limits `leave`s the
    quota it entered: that was a copy the table no longer held, so the client's count
    never came down and its concurrent_calls refused it until the next reload."""
    path = tmp_path / "clients.toml"
    path.write_text('[clients.eve]\ntoken = "eve-token"\nconcurrent_calls = 1\n')
    table = ClientTable(path, clock=FakeClock())
    before, _ = table.lookup("eve-token")
    before.enter()  # a call in progress
    path.write_text(path.read_text() + "requests_per_s = 100\n")
    table.reload()
    after, _ = table.lookup("eve-token")
    assert after.limits.requests_per_s == 100  # the new limits are in force
    assert refusal(after.enter).limit == "concurrent_calls"  # the call still counts
    before.leave()  # it ends
    after.enter()  # and its slot is free
    assert table.quota("eve").active == 1


# -- through gRPC ----------------------------------------------------------------------

CLIENTS = """\
[clients.alice]
token = "alice-token"

[clients.slow]
token = "slow-token"
requests_per_s = 1

[clients.wordy]
token = "wordy-token"
tokens_per_s = 5

[clients.greedy]
token = "greedy-token"
result_mib = 0.0001

[clients.heavy]
token = "heavy-token"
result_mib_per_s = 0.0001

[clients.one]
token = "one-token"
concurrent_calls = 1

[clients.old]
token = "old-token"
expires = 2026-01-01T00:00:00Z

[clients.glacial]
token = "glacial-token"
tokens_per_s = 1e-306
"""


@pytest.fixture(scope="module")
def clock():
    return FakeClock()


@pytest.fixture(scope="module")
def quota_server(svc_engine, tmp_path_factory, clock):
    """A server of the token file CLIENTS, its quota clock fake and its engine gated
    (open unless a test closes it); yields (server, address, engine, table)."""
    path = tmp_path_factory.mktemp("quotas") / "clients.toml"
    path.write_text(CLIENTS)
    now = datetime.datetime(2026, 11, 26, tzinfo=datetime.UTC).timestamp()
    table = ClientTable(path, clock=clock, now=lambda: now)
    engine = GatedEngine(svc_engine)
    engine.output_bytes, engine.buckets = svc_engine.output_bytes, svc_engine.buckets
    engine.gate.set()
    with running_server(engine, clients=table) as (server, address):
        yield server, address, engine, table


def capture(address, token, texts=(EXAMPLE_A,)):
    with AttentionClient(address, token=token, timeout=60, retries=0) as client:
        return client.capture(list(texts), what=WHAT)


def refused(address, token, texts=(EXAMPLE_A,)) -> AttentionServiceError:
    with pytest.raises(AttentionServiceError) as info:
        capture(address, token, texts)
    return info.value


def test_unknown_missing_and_expired_tokens_are_unauthenticated(quota_server):
    _, address, _, _ = quota_server
    for token in ("wrong-token", None, "alice-token"[:-1]):
        e = refused(address, token)
        assert e.code == UNAUTHENTICATED and "missing or wrong bearer token" in e.message
    e = refused(address, "old-token")
    assert e.code == UNAUTHENTICATED
    assert "expired at 2026-01-01 00:00:00 UTC" in e.message
    with AttentionClient(address, token="alice-token", timeout=60, retries=0) as client:
        assert client.server_info().name  # GetModelInfo takes the token too, no quota


def test_a_rate_too_small_to_wait_for_names_a_year_not_an_internal_error(quota_server):
    """tokens_per_s = 1e-306: a request's wait is past any float (inf s); the refusal's
    retry-after-ms could not be an integer, and the call failed UNKNOWN ("cannot convert
    float infinity to integer") instead of RESOURCE_EXHAUSTED."""
    _, address, _, table = quota_server
    (first,) = capture(address, "glacial-token")  # a full bucket: it passes, in debt
    assert first.tokens
    e = refused(address, "glacial-token")
    assert (e.code, e.limit) == (EXHAUSTED, "tokens_per_s")
    assert e.retry_after_s == MAX_RETRY_AFTER_S == 365 * 86400  # a year, in whole ms
    assert "retry after 3.15e+07 s" in e.message
    assert table.quota("glacial").refused == {"tokens_per_s": 1}


class _Refusal(grpc.RpcError):
    """An RpcError as a (hostile) server answers it: RESOURCE_EXHAUSTED, these trailers."""

    def __init__(self, trailers):
        self._trailers = trailers

    def code(self):
        return EXHAUSTED

    def details(self):
        return "over quota"

    def trailing_metadata(self):
        return self._trailers


@pytest.mark.parametrize(
    "sent, seconds",
    [("1500", 1.5), ("-5", 0.0), ("soon", None), ("1" + "0" * 400, None), ("9" * 5000, None)],
)
def test_the_client_reads_any_retry_after_a_server_sends(sent, seconds):
    """A retry-after-ms past a float (10**400) raised OverflowError out of the client,
    not its AttentionServiceError."""
    e = AttentionServiceError.from_rpc_error(_Refusal((("retry-after-ms", sent),)), "h:1")
    assert (e.code, e.retry_after_s) == (EXHAUSTED, seconds)


def test_a_client_past_each_rate_gets_resource_exhausted_naming_it(quota_server, clock, caplog):
    server, address, engine, table = quota_server
    tokens = engine.tokenize([EXAMPLE_A])[0].length
    assert tokens > 5  # one request drains wordy's bucket of 5
    with caplog.at_level(logging.INFO, logger="jaxattn.service"):
        for token, limit, retry in (
            ("slow-token", "requests_per_s", 1.0),
            ("wordy-token", "tokens_per_s", 1.0),  # in debt: waits for a full bucket
            ("heavy-token", "result_mib_per_s", 1.0),
        ):
            (first,) = capture(address, token)  # the first passes (a full bucket)
            assert first.tokens
            e = refused(address, token)
            assert (e.code, e.limit) == (EXHAUSTED, limit)
            assert e.retry_after_s is not None and e.retry_after_s >= retry
            assert "; retry after " in e.message and token not in e.message
            assert table.quota(token.split("-")[0]).refused == {limit: 1}
        e = refused(address, "greedy-token")
        assert (e.code, e.limit, e.retry_after_s) == (EXHAUSTED, "result_mib", None)
        (ok,) = capture(address, "alice-token")  # the others are not held back
        assert ok.tokens
    # the metrics count each refusal under its limit and the client's name, not its token
    registry = server.metrics.registry
    for client, limit in (
        ("slow", "requests_per_s"),
        ("wordy", "tokens_per_s"),
        ("heavy", "result_mib_per_s"),
        ("greedy", "result_mib"),
    ):
        labels = {"limit": limit, "client": client}
        assert registry.get_sample_value("jaxattn_refusals_total", labels) == 1
    clock.t += 1000  # the buckets refill
    for token in ("slow-token", "wordy-token", "heavy-token"):
        assert len(capture(address, token)) == 1
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Capture")]
    assert any("client=wordy status=RESOURCE_EXHAUSTED" in line for line in lines)
    assert any("client=alice status=OK" in line for line in lines)
    assert not any("-token" in line for line in lines)  # names, never tokens


def test_concurrent_calls_past_the_quota_are_refused_until_one_ends(quota_server):
    _, address, engine, table = quota_server
    engine.entered.clear()
    engine.gate.clear()
    try:
        held = []
        first = threading.Thread(target=lambda: held.append(capture(address, "one-token")))
        first.start()
        assert engine.entered.wait(30)  # the first call is in the engine
        e = refused(address, "one-token")
        assert (e.code, e.limit, e.retry_after_s) == (EXHAUSTED, "concurrent_calls", None)
    finally:
        engine.gate.set()
    first.join(30)
    assert len(held) == 1 and len(held[0]) == 1
    assert len(capture(address, "one-token")) == 1  # its slot was given back
    assert table.quota("one").active == 0


def test_a_call_the_queue_turns_away_gets_its_tokens_back(svc_engine, tmp_path):
    """Charged once sized, then refused by admission (queue_size): nothing ran, so its
    tokens go back to its bucket. They stayed taken: a client retrying a busy replica
    spent its tokens_per_s on calls that computed nothing, then was refused for them."""
    path = tmp_path / "clients.toml"
    path.write_text(CLIENTS)
    table = ClientTable(path, clock=FakeClock())  # no refill: only a refund fills it
    engine = GatedEngine(svc_engine)
    engine.output_bytes, engine.buckets = svc_engine.output_bytes, svc_engine.buckets
    with running_server(engine, clients=table, queue_size=1) as (_, address):
        held = threading.Thread(target=capture, args=(address, "alice-token"))
        held.start()
        try:
            assert engine.entered.wait(30)  # alice's call holds the one slot
            e = refused(address, "wordy-token")
            assert (e.code, e.limit) == (EXHAUSTED, "queue_size")
        finally:
            engine.gate.set()
        held.join(30)
        assert len(capture(address, "wordy-token")) == 1  # its bucket is full again
        assert refused(address, "wordy-token").limit == "tokens_per_s"  # now it is spent


def test_the_token_file_is_reloaded_and_a_bad_one_changes_nothing(quota_server, caplog):
    from service.main import reload_clients

    _, address, _, table = quota_server
    try:
        table.path.write_text(CLIENTS.replace("alice-token", "alice-new-token"))
        assert reload_clients(table)
        assert refused(address, "alice-token").code == UNAUTHENTICATED
        assert len(capture(address, "alice-new-token")) == 1
        table.path.write_text("[clients.alice]\ntoken = 3\n")
        with caplog.at_level(logging.ERROR, logger="jaxattn.service"):
            assert not reload_clients(table)
        assert "clients.toml:2: [clients.alice] token: expected" in caplog.text
        assert len(capture(address, "alice-new-token")) == 1  # still in force
    finally:
        table.path.write_text(CLIENTS)
        table.reload()


def test_serve_reads_tokens_refuses_a_bad_file_and_reloads_on_sighup(
    svc_engine, tmp_path, monkeypatch, capsys
):
    import jaxattn.checkpoints.loading
    import service.main
    from jaxattn.cli import main

    monkeypatch.setattr(jaxattn.checkpoints.loading, "load", lambda *a, **k: svc_engine)
    path = tmp_path / "clients.toml"
    path.write_text('[clients.a]\ntoken = "a-token"\nrequests_per_s = -2\n')
    assert main(["serve", "--tokens", str(path), "--port", "0"]) == 1
    assert f"{path}:3: [clients.a] requests_per_s: expected a number > 0" in capsys.readouterr().err
    monkeypatch.setenv("JAXATTN_TOKEN", "t")
    assert main(["serve", "--tokens", str(path), "--port", "0"]) == 2  # two ways: a usage error
    monkeypatch.delenv("JAXATTN_TOKEN")

    path.write_text('[clients.a]\ntoken = "a-token"\n')
    reloaded = threading.Event()
    real_reload = service.main.reload_clients

    def reload_clients(clients):
        done = real_reload(clients)
        reloaded.set()
        return done

    def operate():
        path.write_text('[clients.b]\ntoken = "b-token"\n')
        os.kill(os.getpid(), signal.SIGHUP)
        reloaded.wait(60)

    monkeypatch.setattr(service.main, "reload_clients", reload_clients)
    argv = ["serve", "--tokens", str(path), "--port", "0", "--grace", "0.5"]
    code, served = serve_signalled(monkeypatch, argv, operate)
    assert code == 0
    assert reloaded.is_set() and served[0].clients.names == ("b",)


# -- fair turns in the batcher ---------------------------------------------------------


class RecordingEngine:
    """`run` records the (client, request) of every example it serves, in order."""

    def __init__(self):
        self.served: list[tuple[str, int]] = []
        self.calls = 0

    def run(self, tokenized, spec):
        self.calls += 1
        for pos, item in enumerate(tokenized):
            self.served.append(item)
            yield pos, item


@pytest.mark.parametrize("merge", [True, False])
def test_one_clients_flood_does_not_starve_another(merge):
    engine = RecordingEngine()
    batcher = MicroBatcher(engine, queue_size=64, window_s=0.0, max_batch_examples=4, merge=merge)
    jobs = [batcher.submit("spec", [("A", i)], client="A") for i in range(40)]
    jobs.append(batcher.submit("spec", [("B", 0)], client="B"))  # after all of A's
    batcher.start()
    try:
        for job in jobs:
            assert len(list(job.results())) == 1
            batcher.release(job)
    finally:
        batcher.close(timeout=10)
    order = engine.served
    assert sorted(order) == sorted([("A", i) for i in range(40)] + [("B", 0)])
    assert order.index(("B", 0)) == 1  # merged into the first call, or the second call
    assert [i for c, i in order if c == "A"] == list(range(40))  # A's own order kept
    assert engine.calls == (11 if merge else 41)  # merging unchanged: 4 per call


def test_turns_alternate_between_clients_and_favour_the_one_served_longest_ago():
    engine = RecordingEngine()
    batcher = MicroBatcher(engine, queue_size=64, window_s=0.0, max_batch_examples=1)
    jobs = [batcher.submit("spec", [(c, n)], client=c) for n, c in enumerate("AAAABBC")]
    batcher.start()
    try:
        for job in jobs:
            list(job.results())
            batcher.release(job)
    finally:
        batcher.close(timeout=10)
    assert [c for c, _ in engine.served] == list("ABCABAA")


def test_a_sighup_without_a_token_file_is_logged_and_ignored(svc_engine, monkeypatch, caplog):
    # SIGHUP's default action ends a process: operators send it by habit (logrotate).
    import jaxattn.checkpoints.loading

    monkeypatch.setattr(jaxattn.checkpoints.loading, "load", lambda *a, **k: svc_engine)
    handled = []

    def operate():
        handled.append(signal.getsignal(signal.SIGHUP) not in (signal.SIG_DFL, None))
        if handled[0]:  # never send it to a process that would die of it (this one)
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(1.5)  # the serve loop looks every 0.5 s

    with caplog.at_level(logging.INFO, logger="service.main"):
        code, _ = serve_signalled(monkeypatch, ["serve", "--port", "0", "--grace", "0.5"], operate)
    assert handled == [True] and code == 0
    assert "SIGHUP ignored: no token file (--tokens) to reload" in caplog.text


def serve_signalled(monkeypatch, argv, operate):
    """`jaxattn serve` (argv) in this process; once it listens, `operate()` runs in a
    thread, then SIGTERM ends the server (signals are sent only while serve() holds
    its handlers, which are restored after). Returns (exit code, the ServerOptions
    it served with)."""
    import service.main
    from jaxattn.cli import main

    listening, done, served = threading.Event(), threading.Event(), []
    real_create = service.main.create_server

    def create_server(engine, address, options):
        served.append(options)
        listening.set()  # the signal handlers are installed by now
        return real_create(engine, address, options=options)

    def operator():
        if listening.wait(60) and not done.is_set():
            operate()
        if not done.is_set():
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(service.main, "create_server", create_server)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    thread = threading.Thread(target=operator, daemon=True)
    thread.start()
    try:
        code = main(argv)
    finally:
        done.set()
        listening.set()
        thread.join(10)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return code, served
