"""What an operator or a client may set, refused up front where it could only fail later.

Each case was a live failure on a real `jaxattn serve` (2026-11-27):
`--slow-reader-s inf` stopped the batcher's worker at its first wait (OverflowError:
every later call hung); `--max-request-mib 100000` was an internal OverflowError from
gRPC's 32-bit option; `--max-result-mib 1e30` made every GetModelInfo fail UNKNOWN
(ModelInfo's uint64); `--host ::1` was an internal error ("::1:0" is no address);
a client timeout of inf (or ~7e9 s) was an instant DEADLINE_EXCEEDED blamed on the
server; a token with a newline was INTERNAL "Invalid metadata"; `--queue-size 100000`
was taken, with a pool of up to 100008 handler threads (each admitted call holds one).
"""

from __future__ import annotations

import threading

import pytest
from service_support import running_server

from jaxattn.client import AttentionClient
from jaxattn.errors import InputError, UsageError
from service.options import MAX_QUEUE_SIZE, MAX_WORKERS


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("slow_reader_s", float("inf"), "slow_reader_s must be a number of seconds > 0"),
        ("slow_reader_s", 1e300, "at most 9223372036"),
        ("slow_reader_s", float("nan"), "slow_reader_s must be"),
        ("batch_window_s", float("inf"), "batch_window_s must be a number of seconds >= 0"),
        ("grace_s", -1.0, "grace_s must be a number of seconds >= 0"),
        ("grace_s", float("nan"), "grace_s must be"),
        ("max_request_bytes", 1 << 31, "max_request_bytes must be at most 2147483647"),
        ("max_metadata_bytes", 1 << 31, "max_metadata_bytes must be at most 2147483647"),
        ("max_result_bytes", 1 << 64, "max_result_bytes must be at most 18446744073709551615"),
        ("max_example_bytes", 1 << 64, "max_example_bytes must be at most"),
        ("max_buffered_bytes", 1 << 64, "max_buffered_bytes must be at most"),
        # a pool of 100008 handler threads, each admitted call holding one
        ("queue_size", 100000, r"queue_size must be at most 1024 \(each admitted call holds"),
        ("max_workers", 100000, r"max_workers must be None or 1\.\.1032 \(handler threads"),
        ("max_workers", 0, r"max_workers must be None or 1\.\.1032"),
        ("token", "secret\n", "token cannot be received: it has spaces or a newline"),
        ("token", "s\u00e9cret", "character 2 of 6 is not ASCII"),
    ],
)
def test_options_refuse_what_would_fail_later(option, value, message):
    from service import ServerOptions

    with pytest.raises(ValueError, match=message):
        ServerOptions(**{option: value})


def test_the_largest_values_allowed_serve(svc_engine):
    """At the bounds the server still answers: the worker waits up to TIMEOUT_MAX, and
    ModelInfo carries a byte limit of 2**64 - 1."""
    most = (1 << 64) - 1
    options = dict(slow_reader_s=threading.TIMEOUT_MAX, batch_window_s=0.0, grace_s=0.0)
    options |= dict(queue_size=MAX_QUEUE_SIZE, max_workers=MAX_WORKERS)
    with running_server(
        svc_engine, max_result_bytes=most, max_request_bytes=(1 << 31) - 1, **options
    ) as (
        _,
        address,
    ):
        with AttentionClient(address, timeout=60) as client:
            assert client.server_info().max_result_bytes == most
            for _ in range(2):  # the second finds the worker alive after its long wait
                (cap,) = client.capture(["the cat sat"], what=("head_stats",))
                assert cap.tokens[0] == "[CLS]"


@pytest.mark.parametrize(
    "token, message",
    [
        ("secret\n", "token cannot be sent: it has spaces or a newline around it"),
        ("sec\x00ret", "character 4 of 7 is a control character"),
        ("s\u00e9cret", "character 2 of 6 is not ASCII"),
    ],
)
def test_a_client_token_no_header_carries_is_refused_before_any_call(token, message):
    with pytest.raises(UsageError, match=message) as e:
        AttentionClient("127.0.0.1:9", token=token)
    assert token.strip() not in str(e.value)  # the token itself is never shown


@pytest.mark.parametrize("timeout", [float("inf"), 1e10, float("nan")])
def test_a_timeout_grpc_cannot_keep_is_refused(timeout):
    with pytest.raises(UsageError, match="timeout must be a positive number of seconds, at most"):
        AttentionClient("127.0.0.1:9", timeout=timeout)
    with AttentionClient("127.0.0.1:9") as client:
        with pytest.raises(UsageError, match="at most 1e"):
            client.server_info(timeout=timeout)


def test_a_token_file_token_no_client_can_send_is_refused(tmp_path):
    from service.clients import ClientTable

    path = tmp_path / "clients.toml"
    path.write_text('[clients.a]\ntoken = "tok\\nen"\n')
    with pytest.raises(InputError, match=r"clients.toml:2: \[clients.a\] token: .*control"):
        ClientTable(path)


def test_serve_brackets_an_ipv6_host(monkeypatch):
    """`--host ::1` bound "::1:PORT", which gRPC cannot read: an internal error."""
    import service
    from jaxattn.cli import main
    from jaxattn.netaddr import listen_address

    assert listen_address("::1", 0) == "[::1]:0"
    assert listen_address("[::1]", 5) == "[::1]:5"
    assert listen_address("127.0.0.1", 5) == "127.0.0.1:5"
    seen = []
    monkeypatch.setattr(service, "serve", lambda model, address, *a, **k: seen.append(address) or 0)
    assert main(["serve", "--host", "::1", "--port", "0"]) == 0
    assert seen == ["[::1]:0"]


def test_the_environment_token_is_stripped_as_the_file_is(monkeypatch, tmp_path):
    """A secret mounted into $JAXATTN_TOKEN from a file keeps its newline: the server then
    waited for a token no client could send, and a client's calls failed INTERNAL."""
    from jaxattn.cli.args import read_token

    (tmp_path / "token").write_text("tok-en\n")
    monkeypatch.setenv("JAXATTN_TOKEN", "tok-en\n")
    assert read_token(None) == read_token(str(tmp_path / "token")) == "tok-en"
    monkeypatch.setenv("JAXATTN_TOKEN", " \n")
    assert read_token(None) is None


@pytest.mark.parametrize("texts", [iter(["the cat sat"]), None, 5])
def test_capture_takes_a_list_as_the_engine_does(address, texts):
    """A generator was read twice (the request, then the answers' texts): capture()
    returned no captures at all, without a word; None was a bare TypeError."""
    with AttentionClient(address, timeout=60) as client:
        with pytest.raises(UsageError, match="texts must be a list, got"):
            client.capture(texts, what=("head_stats",))
        with pytest.raises(UsageError, match="texts must be a list, got"):
            list(client.stream(texts, what=("head_stats",)))
        assert len(list(client.capture_iter(iter(["the cat sat"]), what=("head_stats",)))) == 1
