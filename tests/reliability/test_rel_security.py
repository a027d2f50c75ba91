"""TLS with a CA made here, bearer tokens compared in constant time, logs that leak nothing."""

from __future__ import annotations

import inspect
import io
import logging
import subprocess

import grpc
import pytest
from rel_support import MARKER, SENTENCES, WHAT, FaultyEngine, assert_right, running_server

from jaxattn.client import AttentionClient, AttentionServiceError
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.v1 import attention_pb2_grpc as pb_grpc

TOKEN = "tok-9f8e7d6c5b4a39281706f5e4d3c2b1a0"
WRONG = "tok-00000000deadbeefcafe000000000000"
SECRET = "my bank password is hunter2 and my pin is 4417"
U, DENIED = grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAUTHENTICATED


def openssl(*args, cwd) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d, name: str) -> None:
    openssl(
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
        f"/CN={name}",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.pem",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
        cwd=d,
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A test CA, a server certificate it signed (localhost, 127.0.0.1), and a stranger CA."""
    d = tmp_path_factory.mktemp("pki")
    make_ca(d, "ca")
    make_ca(d, "stranger")
    openssl(
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        cwd=d,
    )
    (d / "ext.cnf").write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
        "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
    )
    openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "ext.cnf",
        "-out",
        "server.pem",
        cwd=d,
    )
    return d


@pytest.fixture(scope="module")
def tls_server(rel_engine, pki):
    cert, key = (pki / "server.pem").read_bytes(), (pki / "server.key").read_bytes()
    with running_server(rel_engine, tls_cert=cert, tls_key=key, token=TOKEN) as s:
        yield s


def refused(address, code, **kwargs) -> None:
    with AttentionClient(address, timeout=5, retries=0, **kwargs) as client:
        for call in (client.model_info, lambda: client.capture([SECRET], what=WHAT)):
            with pytest.raises(AttentionServiceError) as info:
                call()
            assert info.value.code == code, info.value


def test_tls_with_a_ca_signed_certificate_and_the_token(tls_server, pki, expected):
    _, address = tls_server
    with AttentionClient(address, token=TOKEN, root_certificates=pki / "ca.pem", timeout=30) as c:
        assert_right(c.capture(list(SENTENCES), what=WHAT), SENTENCES, expected)
    refused(address, DENIED, root_certificates=pki / "ca.pem")  # no token
    refused(address, DENIED, root_certificates=pki / "ca.pem", token=WRONG)
    refused(address, DENIED, root_certificates=pki / "ca.pem", token=TOKEN[:-1])
    refused(address, U, token=TOKEN)  # plaintext to a TLS port
    refused(address, U, root_certificates=pki / "stranger.pem", token=TOKEN)  # untrusted
    refused(address, U, root_certificates=pki / "ca.pem", token=TOKEN, server_name="evil.test")


def test_health_needs_no_token_but_tls(tls_server, pki):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    _, address = tls_server
    creds = grpc.ssl_channel_credentials((pki / "ca.pem").read_bytes())
    with grpc.secure_channel(address, creds) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_the_token_is_compared_in_constant_time(monkeypatch):
    import hmac

    from service import auth

    calls, real = [], hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    interceptor = auth.BearerTokenInterceptor(TOKEN)

    class Details:
        method = "/jaxattn.v1.AttentionService/Capture"

        def __init__(self, token):
            self.invocation_metadata = (("authorization", f"Bearer {token}"),)

    handler = grpc.unary_unary_rpc_method_handler(lambda r, c: r)
    for offered, allowed in ((TOKEN, True), (WRONG, False), ("x", False), (TOKEN * 3, False)):
        got = interceptor.intercept_service(lambda d: handler, Details(offered))
        assert (got is handler) == allowed
    # every offered token (the scheme's name set aside) against the server's
    assert calls == [(t.encode(), TOKEN.encode()) for t in (TOKEN, WRONG, "x", TOKEN * 3)]


def test_no_request_text_or_token_reaches_the_logs(rel_engine):
    """Every path that logs (success, refusals, bad token, engine failure with its
    traceback) is taken with a secret text and a token; neither may appear."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        with running_server(FaultyEngine(rel_engine), token=TOKEN) as (_, address):
            with AttentionClient(address, token=TOKEN, timeout=30, retries=0) as client:
                client.capture([SECRET, (SECRET, SECRET)], what=WHAT)  # OK
                for bad in (dict(layers=[99]), dict(texts=[SECRET * 100])):
                    texts = bad.pop("texts", [SECRET])
                    with pytest.raises(AttentionServiceError):
                        client.capture(texts, **{"what": WHAT, **bad})
            with grpc.insecure_channel(address) as channel:  # a quantity the client would refuse
                stub = pb_grpc.AttentionServiceStub(channel)
                request = pb.CaptureRequest(texts=[pb.Text(text=SECRET)], what=[SECRET])
                with pytest.raises(grpc.RpcError) as refused:
                    list(stub.Capture(request, metadata=[("authorization", f"Bearer {TOKEN}")]))
                assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            with AttentionClient(address, token=TOKEN, timeout=30, retries=0) as client:
                with pytest.raises(AttentionServiceError) as info:  # engine failure
                    client.capture([MARKER, SECRET], what=WHAT)
                assert info.value.code == grpc.StatusCode.INTERNAL
            with AttentionClient(address, token=WRONG, timeout=30, retries=0) as client:
                with pytest.raises(AttentionServiceError):
                    client.capture([SECRET], what=WHAT)
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    text = stream.getvalue()
    assert "status=OK" in text and "status=INTERNAL" in text and "Traceback" in text
    for secret in (SECRET, "hunter2", TOKEN, WRONG, MARKER):
        assert secret not in text, secret


def test_defaults_listen_on_loopback_only():
    from jaxattn.cli import build_parser
    from service import create_server

    assert inspect.signature(create_server).parameters["address"].default.startswith("127.0.0.1:")
    assert build_parser().parse_args(["serve"]).host == "127.0.0.1"
