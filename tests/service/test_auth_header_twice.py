"""A call carrying the `authorization` header more than once is refused, whatever the
values: through a real server on port 0, with one token and with a token file.

Which of several values would name the caller is no question the server answers: had it
taken the first (as it did), a client with its own good token first could add a second
header and still be itself, but a proxy that appends its own header after a client's, or
a client that reads "the last one wins", would be charged as someone else. Refused, no
quota is touched.
"""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hf_fixtures import EXAMPLE_A
from service_support import WHAT, running_server

from jaxattn.client import AttentionClient, AttentionServiceError
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.v1 import attention_pb2_grpc as pb_grpc
from service.clients import ClientTable

CLIENTS = """\
[clients.alice]
token = "alice-token"
requests_per_s = 1

[clients.bob]
token = "bob-token"
requests_per_s = 1
"""


def _info(address: str, *tokens: str):
    """GetModelInfo with one `authorization` header per token (none for no token)."""
    metadata = [("authorization", f"Bearer {t}") for t in tokens]
    with grpc.insecure_channel(address) as channel:
        return pb_grpc.AttentionServiceStub(channel).GetModelInfo(
            pb.GetModelInfoRequest(), metadata=metadata, timeout=30
        )


def _refusal(address: str, *tokens: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        _info(address, *tokens)
    return info.value


def _capture_refusal(address: str, *tokens: str) -> grpc.RpcError:
    metadata = [("authorization", f"Bearer {t}") for t in tokens]
    request = pb.CaptureRequest(texts=[pb.Text(text="a short text")], what=["attention"])
    with grpc.insecure_channel(address) as channel:
        with pytest.raises(grpc.RpcError) as info:
            list(pb_grpc.AttentionServiceStub(channel).Capture(request, metadata=metadata))
    return info.value


def _says_twice(error: grpc.RpcError) -> bool:
    return (
        error.code() == grpc.StatusCode.UNAUTHENTICATED
        and "'authorization' header came more than once" in error.details()
        and "\n" not in error.details()
    )


def _health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(), timeout=30).status


def test_a_second_header_is_refused_with_one_token(svc_engine):
    with running_server(svc_engine, token="the-token") as (_, address):
        assert _info(address, "the-token").name  # one header: in
        for tokens in (
            ("the-token", "the-token"),
            ("the-token", "wrong"),
            ("wrong", "the-token"),
            ("the-token", "the-token", "the-token"),
        ):
            assert _says_twice(_refusal(address, *tokens)), tokens
        assert _says_twice(_capture_refusal(address, "wrong", "the-token"))
        # not the repeated-header message for one wrong or missing header
        for tokens in (("wrong",), ()):
            error = _refusal(address, *tokens)
            assert error.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "more than once" not in error.details()
        assert _health(address) == health_pb2.HealthCheckResponse.SERVING  # no token


def test_a_second_header_never_picks_another_clients_quota(svc_engine, tmp_path):
    path = tmp_path / "clients.toml"
    path.write_text(CLIENTS)
    table = ClientTable(path, clock=lambda: 100.0)  # buckets that never refill
    with running_server(svc_engine, clients=table) as (_, address):
        assert _info(address, "alice-token").name and _info(address, "bob-token").name
        for tokens in (
            ("alice-token", "bob-token"),
            ("bob-token", "alice-token"),
            ("alice-token", "alice-token"),
            ("nobody", "bob-token"),
            ("bob-token", "nobody"),
        ):
            assert _says_twice(_refusal(address, *tokens)), tokens
            assert _says_twice(_capture_refusal(address, *tokens)), tokens
        # refused before any handler: each client's one request (requests_per_s = 1, a
        # clock that stands still) is still there to take, and then gone
        for name in ("alice", "bob"):
            assert table.quota(name).refused == {}
            with AttentionClient(address, token=f"{name}-token", timeout=60, retries=0) as c:
                assert c.capture([EXAMPLE_A], what=WHAT)[0].tokens
                with pytest.raises(AttentionServiceError) as info:
                    c.capture([EXAMPLE_A], what=WHAT)
                assert info.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED


def _with_value(address: str, value: str):
    """GetModelInfo with the `authorization` header `value` as it is."""
    with grpc.insecure_channel(address) as channel:
        return pb_grpc.AttentionServiceStub(channel).GetModelInfo(
            pb.GetModelInfoRequest(), metadata=[("authorization", value)], timeout=30
        )


ANY_CASE = ("Bearer {}", "bearer {}", "BEARER {}", "bEaReR {}")
NOT_BEARER = ("Basic {}", "{}", "Bearer", "Bearer  {}", "Bearer{}", "Bearer {} ", "Token {}")


@pytest.mark.parametrize("mode", ["token", "clients"])
def test_the_schemes_name_is_read_in_any_case(svc_engine, tmp_path, mode):
    """RFC 7235: the auth scheme's name is case-insensitive ("bearer" as "Bearer"); the
    token is compared exactly, and any other scheme or form is UNAUTHENTICATED."""
    path = tmp_path / "clients.toml"
    path.write_text(CLIENTS)
    options = {"token": "alice-token"} if mode == "token" else {"clients": ClientTable(path)}
    with running_server(svc_engine, **options) as (_, address):
        for form in ANY_CASE:
            assert _with_value(address, form.format("alice-token")).name, form
        for form in NOT_BEARER + ("Bearer {}",):
            token = "alice-token" if form != "Bearer {}" else "ALICE-TOKEN"
            with pytest.raises(grpc.RpcError) as info:
                _with_value(address, form.format(token))
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, form
