"""The client keeps the engine's contract: text/truncated/provenance on every capture, the
too_long policy, capture_iter, the engine's layer/head selections, and machine-readable
refusals (`AttentionServiceError.field` / `.limit`)."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from service_support import TEXTS, WHAT

from jaxattn.client import AttentionServiceError
from jaxattn.errors import UsageError

LONG = " ".join(["the cat sat on the mat"] * 12)  # 74 tokens, over the model's 67
SHORT = "the cat sat on the mat"


def test_captures_carry_their_text_truncated_flag_and_provenance(client, address, svc_engine):
    caps = client.capture(TEXTS, what=WHAT)
    assert [c.text for c in caps] == [t if isinstance(t, str) else tuple(t) for t in TEXTS]
    assert not any(c.truncated for c in caps)
    info = svc_engine.info
    for cap in caps:
        assert cap.provenance["source"] == f"server {address}"
        assert cap.provenance["model"] == info.name and cap.provenance["family"] == info.family
        assert cap.provenance["weights"] == info.weights != ""
        with pytest.raises(TypeError):
            cap.provenance["model"] = "other"  # read-only, shared by the captures
    assert client.model_info().weights == info.weights


def test_too_long_error_truncate_and_skip(client):
    with pytest.raises(AttentionServiceError) as info:
        client.capture([SHORT, LONG], what=WHAT)
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT and info.value.field == "texts[1]"
    assert "texts[1] is 74 tokens" in info.value.message and "truncate" in info.value.message
    cut = client.capture([SHORT, LONG], what=WHAT, too_long="truncate")
    assert [c.truncated for c in cut] == [False, True] and cut[1].length == 67
    (kept,) = client.capture([LONG, SHORT], what=WHAT, too_long="skip")
    assert kept.text == SHORT and not kept.truncated
    np.testing.assert_array_equal(kept.attention, cut[0].attention)
    with pytest.raises(TypeError, match="truncate"):  # the 0.2 spelling is gone
        client.capture([SHORT], what=WHAT, truncate=True)
    with pytest.raises(UsageError, match="too_long"):
        client.capture([SHORT], too_long="cut")


def test_capture_iter_reads_any_iterable_window_by_window(client):
    texts = (t for t in [SHORT, LONG, "hello world", LONG, SHORT])  # a generator
    seen = []
    stream = client.capture_iter(texts, what=WHAT, too_long="skip", window=2, progress=seen.append)
    caps = list(stream)
    assert [c.text for c in caps] == [SHORT, "hello world", SHORT]
    assert stream.skipped == [1, 3] and stream.truncated == []
    assert [c is None for c in seen] == [False, True, False, True, False]
    cut = client.capture_iter([LONG, SHORT], what=WHAT, too_long="truncate", window=1)
    assert [c.truncated for c in cut] == [True, False] and cut.truncated == [0]


def test_layers_and_heads_take_the_engines_selections(client, svc_engine):
    (full,) = svc_engine.capture([SHORT], what=WHAT)
    for layers, heads, want_layers, want_heads in [  # each is a compile: two cover the forms
        ("0,-1", slice(0, 2), (0, 2), (0, 1)),
        (range(-1, 0), "-2:", (2,), (1, 2)),
    ]:
        (cap,) = client.capture([SHORT], what=WHAT, layers=layers, heads=heads)
        assert (cap.layers, cap.heads) == (want_layers, want_heads), (layers, heads)
        # A selection is a program of its own: XLA may sum in another order (a scanned
        # layer stack does), so equal within float32 rounding, not bit for bit.
        np.testing.assert_allclose(
            cap.attention, full.attention[np.ix_(want_layers, want_heads)], atol=1e-6, rtol=0
        )
    with pytest.raises(UsageError, match="layer -4 is out of range"):
        client.capture([SHORT], layers=-4)
    with pytest.raises(UsageError, match="neither an index"):
        client.capture([SHORT], heads="0,x")


def test_a_refusal_over_a_limit_names_the_field_and_the_limit(client):
    with pytest.raises(AttentionServiceError) as info:
        client.capture([SHORT] * 65, what=WHAT)  # the shared server takes 64
    error = info.value
    assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert (error.field, error.limit) == ("texts", "max_texts")
