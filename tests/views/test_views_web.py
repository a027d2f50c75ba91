"""The live viewer (`jaxattn web`): the page in a browser, bad input, bounded requests."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
from hf_fixtures import EXAMPLE_A, EXAMPLE_B
from views_helpers import screenshot

from jaxattn.views import create_web_server
from jaxattn.views.payload import VIEWS, needs


@pytest.fixture(scope="module")
def web(engines):
    """(base URL, engine) of a live viewer on 127.0.0.1, port 0, the tiny BERT behind it."""
    engine = engines["bert"]
    server, port = create_web_server(engine, model="tiny-bert", max_chars=400)
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
    page.eval_on_selector("#text-a", "e => e.removeAttribute('maxlength')")
    submit(page, text, text_b)
    err = page.wait_for_selector("#web-error:not([hidden])", timeout=30000)
    assert message in err.inner_text()
    if "tokens" in err.inner_text():
        screenshot(page, "web_error")


def test_request_bounds_and_routes(web):
    url, _ = web
    status, body = post(url + "/api/view", b"x" * (64 * 1024 + 1))
    assert status == 413 and "bytes" in body["error"]
    assert post(url + "/api/view", b"{not json")[0] == 400
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


def test_web_command_binds_loopback_by_default():
    from jaxattn.cli import build_parser

    args = build_parser().parse_args(["web"])
    assert args.host == "127.0.0.1"
