"""The weights' fingerprint is made at load, in a thread of its own (not at the first
capture's first hand-over), and is the fingerprint of the weights the engine holds."""

from __future__ import annotations

import threading

import pytest

import jaxattn
from jaxattn.engine import engine as engine_module
from jaxattn.engine.params import fingerprint


def test_the_fingerprint_is_made_after_load_without_being_asked_for(bert_checkpoint, monkeypatch):
    made, where = threading.Event(), []

    def watched(params):
        where.append(threading.current_thread().name)
        try:
            return fingerprint(params)
        finally:
            made.set()

    monkeypatch.setattr(engine_module, "fingerprint", watched)
    engine = jaxattn.load(bert_checkpoint)
    # Nothing asks for it: no capture, no info. It is made all the same, off this thread.
    assert made.wait(60)
    assert where == ["jaxattn-fingerprint"]
    assert engine.weights_fingerprint == fingerprint(engine.step.canonical_params())
    assert engine.info.weights == engine.weights_fingerprint
    assert where == ["jaxattn-fingerprint"]  # made once


def test_a_fingerprint_that_cannot_be_made_fails_where_it_is_asked_for(
    bert_checkpoint, monkeypatch
):
    def broken(params):
        raise OSError("the weights could not be read")

    monkeypatch.setattr(engine_module, "fingerprint", broken)
    engine = jaxattn.load(bert_checkpoint)  # the load itself does not fail
    with pytest.raises(OSError, match="the weights could not be read"):
        _ = engine.weights_fingerprint
    with pytest.raises(OSError, match="the weights could not be read"):
        engine.capture(["a short text"], what=("attention",))
