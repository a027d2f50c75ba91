"""One capture source: Engine and AttentionClient both satisfy `jaxattn.CaptureSource`."""

from __future__ import annotations

import argparse
import inspect
import subprocess
import sys

import numpy as np
import pytest

import jaxattn
from jaxattn.cli.source import open_source
from jaxattn.client import AttentionClient
from jaxattn.quantities import COMMON


def test_engine_and_client_are_capture_sources(engines):
    assert isinstance(engines["bert"], jaxattn.CaptureSource)
    with AttentionClient("127.0.0.1:1", timeout=1, retries=0) as client:
        assert isinstance(client, jaxattn.CaptureSource)
    assert engines["bert"].model_info() == engines["bert"].info


@pytest.mark.parametrize(
    "cls", [jaxattn.Engine, AttentionClient, jaxattn.CaptureSource], ids=lambda c: c.__name__
)
@pytest.mark.parametrize("method", ["capture", "stream", "capture_iter"])
def test_capture_options_are_keyword_only_after_texts(cls, method):
    # The same positional call must not mean different things on the two sources
    # (a sixth argument was Engine's `truncate` and the client's `codec`).
    params = list(inspect.signature(getattr(cls, method)).parameters.values())
    names = [p.name for p in params]
    assert names[:2] == ["self", "texts"], names
    positional = [p.name for p in params[2:] if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    assert not positional, f"{cls.__name__}.{method}: {positional} are not keyword-only"
    assert "truncate" not in names  # too_long="truncate" is the one spelling


@pytest.mark.parametrize("method", ["capture", "stream", "capture_iter"])
def test_the_protocol_names_every_option_both_sources_take(method):
    # Code written against CaptureSource may pass what both sources take, with the
    # same defaults; what one source alone takes (the engine's ablation, the
    # client's codec) stays out of it.
    def options(cls):
        params = list(inspect.signature(getattr(cls, method)).parameters.values())[2:]
        return {p.name: p.default for p in params}

    engine, client = options(jaxattn.Engine), options(AttentionClient)
    common = {name: engine[name] for name in engine.keys() & client.keys()}
    assert {name: client[name] for name in common} == common, "the sources' defaults differ"
    assert options(jaxattn.CaptureSource) == common


def test_positional_options_and_truncate_are_refused(engines):
    engine = engines["bert"]
    with AttentionClient("127.0.0.1:1", timeout=1, retries=0) as client:
        for source in (engine, client):
            for method in (source.capture, source.stream, source.capture_iter):
                with pytest.raises(TypeError, match="positional"):
                    method(["a"], ("attention",))
                with pytest.raises(TypeError, match="truncate"):
                    method(["a"], what=("attention",), truncate=True)
    with pytest.raises(TypeError, match="truncate"):
        engine.tokenize(["a"], truncate=True)
    with pytest.raises(jaxattn.UsageError, match="unknown too_long True: valid are .*error"):
        engine.capture(["a"], too_long=True)  # a bad policy is named, with the valid ones


def test_engine_stream_gives_the_captures_in_input_order(engines, standard_texts, full_captures):
    # Buckets finish shortest first; stream still yields in input order.
    texts = standard_texts["bert"][::-1]
    streamed = list(engines["bert"].stream(texts, what=COMMON))
    for cap, full in zip(streamed, full_captures["bert"][::-1], strict=True):
        assert cap.tokens == full.tokens
        np.testing.assert_allclose(cap.attention, full.attention, rtol=1e-5, atol=1e-5)


def test_open_source_picks_the_engine_or_the_client(monkeypatch, engines):
    monkeypatch.setattr(jaxattn, "load", lambda path=None: engines["bert"])
    local = argparse.Namespace(
        server=None, model="m", attention=None, attention_block=None, token_file=None, tls_ca=None
    )
    assert open_source(local) is engines["bert"]
    remote = argparse.Namespace(
        server="127.0.0.1:1,127.0.0.1:2",
        token_file=None,
        tls_ca=None,
        timeout=5.0,
        codec="lz4",
        model=None,
        attention=None,
        attention_block=None,
    )
    with open_source(remote) as client:
        assert isinstance(client, AttentionClient) and client.codec == "lz4"
        assert client._channels.addresses == ("127.0.0.1:1", "127.0.0.1:2")


def test_client_refuses_an_unknown_default_codec():
    with pytest.raises(jaxattn.UsageError, match="unknown codec 'gzip'"):
        AttentionClient("127.0.0.1:1", codec="gzip")


def test_version_and_python_dash_m():
    out = subprocess.run(
        [sys.executable, "-m", "jaxattn", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.startswith("jaxattn ")
