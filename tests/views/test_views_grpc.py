"""Views of captures that came through the gRPC server: `view --server`, `web --server`."""

from __future__ import annotations

import argparse
import json
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest
from hf_fixtures import EXAMPLE_A, EXAMPLE_B

from jaxattn.cli import main
from jaxattn.views.payload import VIEWS, decode_array, needs


@pytest.fixture(scope="module")
def grpc_address(engines):
    from service import create_server

    server, port = create_server(engines["bert"], "127.0.0.1:0", grace_s=1.0)
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(grace=0.5).wait(10)


def test_view_and_web_through_server(grpc_address, engines, tmp_path):
    from jaxattn.cli.args import add_codec_argument, add_source_arguments
    from jaxattn.cli.source import open_source
    from jaxattn.views import create_web_server

    want = engines["bert"].capture([(EXAMPLE_A, EXAMPLE_B)], what=needs(VIEWS))[0]
    out = tmp_path / "v.html"
    pair = f"{EXAMPLE_A} ||| {EXAMPLE_B}"
    assert main(["view", pair, "--server", grpc_address, "--out", str(out)]) == 0
    assert '"sentence_b_start":' + str(want.sentence_b_start) in out.read_text(encoding="utf-8")

    # the web command's own arguments (a hand-made Namespace missed each flag added since)
    parser = argparse.ArgumentParser()
    add_source_arguments(parser)
    add_codec_argument(parser)
    args = parser.parse_args(["--server", grpc_address, "--timeout", "60"])
    remote = open_source(args)  # an AttentionClient: the web server takes any CaptureSource
    server, port = create_web_server(remote, model=remote.model_info().name)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        body = json.dumps({"text": EXAMPLE_A, "text_b": EXAMPLE_B, "views": ["head"]}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/api/view", data=body)
        with urllib.request.urlopen(req, timeout=60) as r:
            doc = json.loads(r.read())
    finally:
        server.shutdown()
        server.server_close()
        remote.close()
    ex = doc["examples"][0]
    assert ex["tokens"] == list(want.tokens) and doc["views"] == ["head"]
    np.testing.assert_allclose(decode_array(ex["weights"]["attention"]), want.attention, atol=1e-6)


@pytest.fixture(scope="module")
def served_llama_web(tmp_path_factory):
    """(base URL, the served capture source) of a live viewer whose captures come through a
    server of the tiny Llama (4 query heads, 2 key/value heads, 64 positions)."""
    from llama_fixture import make_llama_checkpoint
    from local_server import running_server

    import jaxattn
    from jaxattn.client import AttentionClient
    from jaxattn.views import create_web_server

    engine = jaxattn.load(make_llama_checkpoint(tmp_path_factory.mktemp("llama")), buckets=(32,))
    with running_server(engine) as (_, address), AttentionClient(address) as client:
        server, port = create_web_server(client, model="llama")
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{port}", client
        server.shutdown()
        server.server_close()


def test_the_live_viewers_decoder_neuron_view_opens_at_its_last_token(page, served_llama_web):
    """As a saved page does: a decoder's first token sees only itself. The live viewer's
    documents have no "start"; the page falls back to views.causal.default_query."""
    from views_helpers import wait_ready

    url, client = served_llama_web
    tokens = client.capture(["The cat sat"], what=("attention",))[0].tokens
    page.goto(url + "/")
    page.fill("#text-a", "The cat sat")
    page.click("#go")
    wait_ready(page)
    page.click('.tab[data-view="neuron"]')
    page.wait_for_selector("#nv-info")
    assert f'query "{tokens[-1]}" ({len(tokens) - 1});' in page.text_content("#nv-info")
    assert "key/value head 0 of 2" in page.text_content("#nv-info")


def test_a_served_text_over_the_limit_is_told_to_shorten_it(served_llama_web):
    """The server's refusal on the page, in the page's terms (no too_long= to pass)."""
    url, _ = served_llama_web
    for along in (False, True):
        body = json.dumps({"text": "ab " * 40, "along": along}).encode()
        req = urllib.request.Request(f"{url}/api/view", data=body)
        with pytest.raises(urllib.error.HTTPError) as got:
            urllib.request.urlopen(req, timeout=60)
        assert got.value.code == 400
        error = json.loads(got.value.read())["error"]
        assert "over the model's limit of 64" in error and "shorten it" in error, error
        assert "too_long" not in error and "--too-long" not in error, error
