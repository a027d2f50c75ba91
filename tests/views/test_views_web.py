"""The live viewer (`jaxattn web`): the page in a browser, bad input, bounded requests."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from hf_fixtures import EXAMPLE_A, EXAMPLE_B
from views_helpers import screenshot

from jaxattn.errors import UsageError
from jaxattn.quantities import ENTROPY_SMOOTHING
from jaxattn.views import create_web_server
from jaxattn.views.payload import VIEWS, needs
from jaxattn.views.web import BadInput, host_names, parse_request


@pytest.fixture(scope="module")
def web(engines):
    """(base URL, engine) of a live viewer on 127.0.0.1, port 0, the tiny BERT behind it."""
    engine = engines["bert"]
    server, port = create_web_server(
        engine, model="tiny-bert", max_chars=400, max_document_chars=3000, max_body=64 * 1024
    )
    assert server.server_address[0] == "127.0.0.1"  # the default bind
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}", engine
    server.shutdown()
    server.server_close()
    thread.join(10)


def post(url: str, data: bytes) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


LINES = "els => els.map(e => [+e.dataset.i, +e.dataset.j, +e.dataset.head, +e.dataset.w])"


def submit(page, text: str, text_b: str | None = None) -> None:
    page.fill("#text-a", text)
    if (text_b is not None) != page.is_checked("#pair"):
        page.click("#pair")
    if text_b is not None:
        page.fill("#text-b", text_b)
    page.click("#go")


def test_live_page_captures_a_pair(page, web):
    url, engine = web
    page.goto(url + "/")
    assert "tiny-bert" in page.inner_text("h1")
    submit(page, EXAMPLE_A, EXAMPLE_B)
    page.wait_for_selector('#jaxattn[data-state="ready"]', timeout=30000)
    cap = engine.capture([(EXAMPLE_A, EXAMPLE_B)], what=needs(VIEWS))[0]
    rows = page.eval_on_selector_all("#hv-svg line", LINES)
    t = cap.length
    want = {
        (i, j, h): cap.attention[0, h, i, j] for h in range(3) for i in range(t) for j in range(t)
    }
    got = {(i, j, h): w for i, j, h, w in rows}
    assert got.keys() == want.keys()
    assert max(abs(got[k] - want[k]) for k in want) < 1e-6
    assert page.query_selector("#hv-filter") is not None  # a pair: sentence filters
    screenshot(page, "web_head_view")
    page.click('.tab[data-view="neuron"]')
    page.wait_for_selector('#nv-rows .cell[data-kind="softmax"][data-j="0"]')
    v = float(page.get_attribute('#nv-rows .cell[data-kind="softmax"][data-j="2"]', "data-v"))
    assert v == pytest.approx(cap.attention[0, 0, 0, 2], abs=1e-5)
    screenshot(page, "web_neuron_view")
    assert all(u.startswith(url) for u in page.requests), page.requests

    # views picked on the page: only the model view
    for view in ("head", "neuron", "stats"):
        page.uncheck(f'input[name="view"][value="{view}"]')
    submit(page, "the cat sat on the mat")
    page.wait_for_function("() => document.querySelectorAll('.tab').length === 1")
    assert page.get_attribute(".tab", "data-view") == "model"


def test_a_pasted_text_keeps_its_line_breaks_and_enter_submits(page, web):
    """The text box keeps a pasted document's line breaks (a one-line input made them
    spaces: a decoder's newline tokens were lost); Enter submits, as in a one-line box."""
    url, engine = web
    page.goto(url + "/")
    text = "the cat sat\non the mat"
    page.fill("#text-a", text)
    page.press("#text-a", "Enter")
    page.wait_for_selector('#jaxattn[data-state="ready"]', timeout=30000)
    shown = page.eval_on_selector_all(
        '#hv-svg text.tok[data-side="left"]', "els => els.map(e => e.textContent)"
    )
    assert shown == list(engine.capture([text], what=("attention",))[0].tokens)
    assert "on" in shown and page.input_value("#text-a") == text


@pytest.mark.parametrize(
    ("text", "text_b", "message"),
    [
        ("   ", None, "empty"),
        (EXAMPLE_A, "  ", "Sentence B of the pair is empty"),
        ("zq " * 45, None, "limit of 67: shorten it"),  # 90 tokens: over the tiny model's
        ("x" * 401, None, "the limit is 400"),  # over max_chars
    ],
)
def test_bad_input_shows_a_readable_error(page, web, text, text_b, message):
    url, _ = web
    page.goto(url + "/")
    submit(page, text, text_b)
    err = page.wait_for_selector("#web-error:not([hidden])", timeout=30000)
    assert message in err.inner_text()
    assert page.input_value("#text-a") == text  # not cut at the limit without a word
    if "tokens" in err.inner_text():
        screenshot(page, "web_error")


def along_reference(cap, layer: int, head: int) -> dict:
    """Whole-text sink, previous-token share and entropy of one head, from its map by hand:
    means over the query rows 1 .. T-1 (docs/views.md, "Statistics along the text")."""
    w = cap.attention[layer, head].astype(np.float64)
    t = cap.length
    s = ENTROPY_SMOOTHING
    smoothed = (1 - s) * w + s / t
    entropy = -(smoothed * np.log(smoothed)).sum(-1)
    return dict(
        sink=w[1:, 0].mean(),
        prev=np.mean([w[i, i - 1] for i in range(1, t)]),
        entropy=entropy[1:].mean(),
    )


def test_long_document_gets_the_statistics_along_the_text(page, web):
    url, engine = web
    text = " ".join(["the cat sat on the mat and then it slept"] * 3)  # ~47 tokens
    status, doc = post(url + "/api/view", json.dumps({"text": text, "along": True}).encode())
    assert status == 200, doc
    assert doc["format"] == "jaxattn.views.segments.page/1"
    (example,) = doc["examples"]
    seg = example["doc"]
    cap = engine.capture([text], what=("attention",))[0]
    assert seg["T"] == cap.length and len(example["tokens"]) == cap.length
    att = seg["kinds"]["attention"]
    assert att["source"][0][0] != "maps"  # from the per-row statistics, no map captured
    for layer in range(len(seg["layers"])):
        for head in range(len(seg["heads"])):
            want = along_reference(cap, layer, head)
            for stat, v in want.items():
                assert att["whole"][stat][layer][head] == pytest.approx(v, rel=1e-4, abs=1e-6)
            assert att["whole"]["local"][layer][head] is None  # needs a map
    # over the sentence limit (400) but within the document limit: accepted; past it, named
    long = " ".join(["word"] * 90)  # 449 characters, ~92 tokens: over the model's 67
    status, body = post(url + "/api/view", json.dumps({"text": long, "along": True}).encode())
    assert status == 400 and "limit of 67" in body["error"]
    status, body = post(url + "/api/view", json.dumps({"text": "x" * 3001, "along": True}).encode())
    assert status == 400 and "the limit is 3000" in body["error"]
    status, body = post(url + "/api/view", json.dumps({"text": long}).encode())
    assert status == 400 and "long document" in body["error"]
    status, body = post(url + "/api/view", json.dumps({"text": "a", "along": "yes"}).encode())
    assert status == 400 and "'along'" in body["error"]

    # the page: tick "long document", paste, see the heat maps of every layer x head
    page.goto(url + "/")
    page.click("#along")
    assert page.get_attribute("#text-a", "maxlength") is None  # the server names the limit
    submit(page, text)
    page.wait_for_selector('#jaxattn[data-state="ready"] canvas.sg-map', timeout=30000)
    rows = page.get_attribute('canvas.sg-map[data-stat="sink"]', "data-rows")
    assert int(rows) == len(seg["layers"]) * len(seg["heads"])
    screenshot(page, "web_along")


def test_request_bounds_and_routes(web):
    url, _ = web
    status, body = post(url + "/api/view", b"x" * (64 * 1024 + 1))
    assert status == 413 and "bytes" in body["error"]
    assert post(url + "/api/view", b"{not json")[0] == 400
    status, body = post(url + "/api/view", '{"text": "café"}'.encode("latin-1"))
    assert status == 400 and "not UTF-8" in body["error"], body
    # JSON nested past Python's recursion limit (found by fuzzing the other parsers)
    assert post(url + "/api/view", b"[" * 3000 + b"]" * 3000)[0] == 400
    status, body = post(url + "/api/view", json.dumps({"text": "a", "views": ["nope"]}).encode())
    assert status == 400 and "unknown views" in body["error"]
    status, body = post(url + "/api/view", json.dumps({"text": "hello ||| "}).encode())
    assert status == 400 and "empty" in body["error"]
    assert post(url + "/nowhere", b"{}")[0] == 404
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url + "/etc/passwd", timeout=10)
    assert e.value.code == 404
    with urllib.request.urlopen(url + "/", timeout=10) as r:
        page = r.read().decode()
        assert "connect-src 'self'" in r.headers.get("Content-Type", "") + page


def send(url: str, method: str, path: str, body: bytes = b"", headers=None) -> tuple[int, bytes]:
    """(status, body) of one raw request with exactly `headers` (urllib adds its own)."""
    port = int(url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_other_sites_cannot_use_the_viewer_through_a_browser(web):
    """DNS rebinding (a foreign Host) and cross-site requests (a foreign Origin, a
    form or text/plain POST a browser sends without a preflight) are refused before any
    capture; the page's own requests, by any loopback name, and scripts' (no Origin)
    still work."""
    url, _ = web
    port = int(url.rsplit(":", 1)[1])
    body = json.dumps({"text": "hello there", "views": ["stats"]}).encode()
    own = {"Host": f"127.0.0.1:{port}", "Content-Type": "application/json"}
    status, page = send(url, "GET", "/", headers={"Host": f"evil.example:{port}"})
    assert status == 421 and b"evil.example" in page and b"<html" not in page
    status, _ = send(url, "POST", "/api/view", body, {**own, "Host": f"evil.example:{port}"})
    assert status == 421
    status, _ = send(url, "POST", "/api/view", body, {**own, "Host": "evil.example"})
    assert status == 421
    status, _ = send(url, "POST", "/api/view", body, {**own, "Host": "localhost.evil.example"})
    assert status == 421
    status, err = send(url, "POST", "/api/view", body, {**own, "Origin": "http://evil.example"})
    assert status == 403 and b"evil.example" in err
    for origin in ("null", f"https://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"):
        status, _ = send(url, "POST", "/api/view", body, {**own, "Origin": origin})
        assert status == 403  # a sandboxed frame or a file, another scheme or port
    # any loopback name, on any port: an SSH tunnel's (ssh -L 9000:127.0.0.1:PORT)
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "[::1]:9000", "LocalHost:9000"):
        origin = f"http://{host}"
        headers = {**own, "Host": host, "Origin": origin}
        status, doc = send(url, "POST", "/api/view", body, headers)
        assert status == 200 and "stats" in json.loads(doc)["views"]
        assert send(url, "GET", "/", headers={"Host": host})[0] == 200
    status, doc = send(url, "POST", "/api/view", body, {"Host": f"localhost:{port}"})
    assert status == 200 and "stats" in json.loads(doc)["views"]  # curl -d, no Origin
    assert host_names("0.0.0.0") is None  # meant for others, under any name
    assert host_names("192.168.1.5") is None
    assert host_names("127.0.0.2") == {"localhost", "127.0.0.1", "[::1]", "127.0.0.2"}


def test_an_engine_or_server_failure_is_not_called_bad_input():
    """A capture that fails mid-request answers with the failure's message and a status
    that blames the right side: 400 for a refusal of the text (a server's
    INVALID_ARGUMENT), 502 for a gRPC server that failed, 500 for the engine; the engine
    is free again for the next request (each one here answers)."""
    import grpc

    from jaxattn.client import AttentionServiceError
    from jaxattn.errors import DeviceMemoryError

    failures = [
        (AttentionServiceError(grpc.StatusCode.UNAVAILABLE, "connection refused"), 502),
        (AttentionServiceError(grpc.StatusCode.INTERNAL, "the server's device failed"), 502),
        (AttentionServiceError(grpc.StatusCode.INVALID_ARGUMENT, "texts[0] is empty"), 400),
        (DeviceMemoryError("one example does not fit the device's memory"), 500),
        (RuntimeError("XLA runtime error"), 500),
    ]
    messages = [
        "connection refused",
        "the server's device failed",
        "texts[0] is empty",
        "does not fit the device's memory",
        "XLA runtime error",
    ]

    class Failing:
        def capture(self, texts, what=None):
            raise failures[0][0]

    server, port = create_web_server(Failing())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        for message in messages:
            status, body = post(f"http://127.0.0.1:{port}/api/view", b'{"text": "hello"}')
            assert (status, message in body["error"]) == (failures[0][1], True), body
            failures.pop(0)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_a_stalled_client_is_dropped():
    """A client that stops sending, mid-headers or mid-body, is closed after the idle
    timeout (408 for a body) instead of holding a thread and a socket for ever; the
    engine is never reached."""

    class NoEngine:
        def capture(self, *args, **kwargs):
            raise AssertionError("no capture expected")

    server, port = create_web_server(NoEngine(), idle_timeout=0.5)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        head = f"POST /api/view HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode()
        for sent, want in ((head, b""), (head + b"Content-Length: 99\r\n\r\n{", b" 408 ")):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(sent)
                start, got = time.monotonic(), b""
                while chunk := s.recv(4096):  # until the server closes
                    got += chunk
                assert time.monotonic() - start < 5 and want in got, got
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "must be a JSON object"),
        ({"text": "a", "along": "yes"}, "'along' must be true or false"),
        ({"text": 3}, "'text' must be a string"),
        ({"text": "a ||| b ||| c"}, "The text has"),
        ({"text": "  "}, "the text is empty"),
        ({"text": "a", "text_b": " "}, "Sentence B of the pair is empty"),
        ({"text": "a" * 11}, "the sentence has 11 characters; the limit is 10"),
        ({"text": "a", "views": "heads"}, "'views' must be a list"),
        ({"text": "a", "views": ["nope"]}, "unknown views"),
    ],
)
def test_a_bad_request_is_a_usage_error(body, message):
    """BadInput is a UsageError (a JaxattnError, still a ValueError): the server answers
    400 for it as before (test_request_bounds_and_routes), Python callers catch it as
    jaxattn's."""
    with pytest.raises(BadInput, match=message) as err:
        parse_request(body, max_chars=10)
    assert isinstance(err.value, UsageError)


def test_web_command_binds_loopback_by_default():
    from jaxattn.cli import build_parser

    args = build_parser().parse_args(["web"])
    assert args.host == "127.0.0.1"
