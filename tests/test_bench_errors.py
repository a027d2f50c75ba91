"""The benchmark helpers' refusals are jaxattn errors (docs/errors.md), raised before any
model, server or slow import is touched: an unbounded load run or an unknown synthetic
model is a UsageError, a sentence pool too small for the load mix an InputError."""

from __future__ import annotations

import pytest

from jaxattn.bench.load_generator import run_load
from jaxattn.bench.mix import build_mix, loadtest
from jaxattn.bench.synthetic import random_checkpoint
from jaxattn.errors import InputError, JaxattnError, UsageError

CASES = [
    (
        "unbounded load run",
        UsageError,
        "give max_requests, duration or both",
        lambda tmp: run_load("127.0.0.1:1", [], []),
    ),
    (
        "unbounded load test",
        UsageError,
        "give --requests N, --duration S or both",
        lambda tmp: loadtest("127.0.0.1:1"),
    ),
    (
        "small pool",
        InputError,
        r"only 7 usable sentences \(the mix needs 8\): give --conllu",
        lambda tmp: build_mix(None, ["a b"] * 7),
    ),
    (
        "unknown synthetic model",
        UsageError,
        "unknown synthetic model 'gpt-3': valid are bert-base",
        lambda tmp: random_checkpoint("gpt-3", tmp),
    ),
]


@pytest.mark.parametrize(("name", "cls", "match", "call"), CASES, ids=[c[0] for c in CASES])
def test_each_refusal_is_a_jaxattn_error_of_its_kind(name, cls, match, call, tmp_path):
    with pytest.raises(cls, match=match) as err:
        call(tmp_path)
    assert isinstance(err.value, JaxattnError) and isinstance(err.value, ValueError)
    assert not any(tmp_path.iterdir())  # refused before writing anything


def test_a_load_test_of_an_unreachable_server_fails_before_loading_the_model(monkeypatch):
    """The server is waited for (and named) first: the model's load and the right answers
    (minutes for a large model) came before, then 60 s of waiting, then the error."""
    import grpc

    import jaxattn
    from jaxattn.client import AttentionClient, AttentionServiceError

    said, loaded = [], []

    def unreachable(self, timeout=10.0):
        raise AttentionServiceError(grpc.StatusCode.UNAVAILABLE, "not ready", "127.0.0.1:1")

    monkeypatch.setattr(AttentionClient, "wait_ready", unreachable)
    monkeypatch.setattr(jaxattn, "load", lambda *a, **k: loaded.append(a))
    with pytest.raises(AttentionServiceError):
        loadtest("127.0.0.1:1", requests=1, log=said.append)
    assert loaded == [] and said == ["waiting for the server at 127.0.0.1:1 (up to 60 s)"]
