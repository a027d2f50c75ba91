"""Views of captures that came through the gRPC server: `view --server`, `web --server`."""

from __future__ import annotations

import argparse
import json
import threading
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
    from jaxattn.cli.source import open_source
    from jaxattn.views import create_web_server

    want = engines["bert"].capture([(EXAMPLE_A, EXAMPLE_B)], what=needs(VIEWS))[0]
    out = tmp_path / "v.html"
    pair = f"{EXAMPLE_A} ||| {EXAMPLE_B}"
    assert main(["view", pair, "--server", grpc_address, "--out", str(out)]) == 0
    assert '"sentence_b_start":' + str(want.sentence_b_start) in out.read_text(encoding="utf-8")

    args = argparse.Namespace(
        server=grpc_address,
        token_file=None,
        tls_ca=None,
        timeout=60.0,
        codec="zstd",
        model=None,
        attention=None,
    )
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
