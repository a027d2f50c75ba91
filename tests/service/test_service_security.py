"""TLS with a certificate made here, bearer tokens, and logs that leak nothing."""

from __future__ import annotations

import logging
import subprocess
import time

import grpc
import pytest
from service_support import WHAT, running_server

from jaxattn.client import AttentionClient, AttentionServiceError

TOKEN = "s3cret-token-value"
SECRET_TEXT = "the quick brown fox jumps over the lazy dog"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """(cert PEM, key PEM): self-signed, for localhost and 127.0.0.1, made by openssl."""
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(d / "key.pem"),
            "-out",
            str(d / "cert.pem"),
        ],
        check=True,
        capture_output=True,
    )
    return (d / "cert.pem").read_bytes(), (d / "key.pem").read_bytes()


def test_tls_round_trip_with_a_certificate_made_in_the_test(svc_engine, certificate, tmp_path):
    cert, key = certificate
    (tmp_path / "ca.pem").write_bytes(cert)
    with running_server(svc_engine, tls_cert=cert, tls_key=key) as (_, address):
        with AttentionClient(address, root_certificates=tmp_path / "ca.pem", timeout=30) as c:
            (cap,) = c.capture([SECRET_TEXT], what=WHAT)
            assert cap.tokens[0] == "[CLS]"
        # A plaintext client cannot talk to the TLS port.
        with AttentionClient(address, timeout=3, retries=0) as c:
            with pytest.raises(AttentionServiceError) as info:
                c.model_info()
            assert info.value.code == grpc.StatusCode.UNAVAILABLE


def test_tls_rejects_an_untrusted_certificate(svc_engine, certificate):
    cert, key = certificate
    other = subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=other",
            "-keyout",
            "/dev/null",
        ],
        check=True,
        capture_output=True,
    ).stdout
    with running_server(svc_engine, tls_cert=cert, tls_key=key) as (_, address):
        with AttentionClient(address, root_certificates=other, timeout=3, retries=0) as c:
            with pytest.raises(AttentionServiceError) as info:
                c.model_info()
            assert info.value.code == grpc.StatusCode.UNAVAILABLE


@pytest.fixture(scope="module")
def token_server(svc_engine):
    with running_server(svc_engine, token=TOKEN) as s:
        yield s


@pytest.mark.parametrize("token", [None, "wrong", TOKEN + "x", ""])
def test_missing_or_wrong_token_is_unauthenticated(token_server, token):
    _, address = token_server
    with AttentionClient(address, token=token or None, timeout=10) as c:
        for call in (c.model_info, lambda: c.capture([SECRET_TEXT], what=WHAT)):
            with pytest.raises(AttentionServiceError) as info:
                call()
            assert info.value.code == grpc.StatusCode.UNAUTHENTICATED
            assert "bearer token" in info.value.message


def test_right_token_works_and_health_needs_none(token_server):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    server, address = token_server
    with AttentionClient(address, token=TOKEN, timeout=30) as c:
        assert c.model_info().layers == 3
        (cap,) = c.capture([SECRET_TEXT], what=WHAT)
        assert len(cap.tokens) > 2
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_one_log_line_per_request_without_text_or_token(token_server, caplog):
    caplog.set_level(logging.INFO, logger="jaxattn.service")
    _, address = token_server
    with AttentionClient(address, token=TOKEN, timeout=30) as c:
        c.capture([SECRET_TEXT, (SECRET_TEXT, "hello world")], what=WHAT)
    end = time.monotonic() + 5
    while not any("Capture" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < end
        time.sleep(0.01)
    lines = [r.getMessage() for r in caplog.records if "Capture" in r.getMessage()]
    assert len(lines) == 1
    line = lines[0]
    for field in (
        "peer=ipv4:127.0.0.1:",
        "status=OK",
        "texts=2",
        "tokens=",
        "bytes_out=",
        "duration_ms=",
    ):
        assert field in line
    assert "tokens=0" not in line and "bytes_out=0" not in line
    for record in caplog.records:
        message = record.getMessage()
        assert TOKEN not in message and "quick brown" not in message and "hello" not in message


def test_a_certificate_and_key_grpc_cannot_serve_are_a_usage_error(svc_engine, certificate):
    """Not PEM, swapped, or a key of another certificate: gRPC cannot add the TLS port.
    That was an internal "cannot listen on ..." error, after the model had loaded;
    `jaxattn serve` now checks the pair (`check_tls`) before it loads the model."""
    from jaxattn.errors import UsageError
    from service import ServerOptions, create_server
    from service.server import check_tls

    cert, key = certificate
    check_tls(ServerOptions(tls_cert=cert, tls_key=key))  # the right pair passes
    other_key = subprocess.run(
        ["openssl", "genpkey", "-algorithm", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
        check=True,
        capture_output=True,
    ).stdout
    message = "--tls-cert/--tls-key: gRPC cannot serve TLS with them"
    for bad_cert, bad_key in [(b"junk", b"junk"), (key, cert), (cert, other_key)]:
        with pytest.raises(UsageError, match=message):
            check_tls(ServerOptions(tls_cert=bad_cert, tls_key=bad_key))
        with pytest.raises(UsageError, match=message):
            create_server(svc_engine, "127.0.0.1:0", tls_cert=bad_cert, tls_key=bad_key)
