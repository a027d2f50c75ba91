"""Hostile requests through the real gRPC stack: every field fuzzed, every answer a clear status.

The property tests run against a server whose engine computes nothing (its
`run` returns zero tensors of the right shapes; validation, tokenisation,
batching, encoding and the wire are the real ones), so hypothesis can try many
requests, spec combinations included, without a compile each. The named
hostile cases then hit the real engine, which must answer right afterwards.
"""

from __future__ import annotations

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rel_support import (
    SENTENCES,
    WHAT,
    ShapeEngine,
    assert_right,
    raw_capture,
    request_bytes,
    running_server,
)

from jaxattn.quantities import QUANTITIES

OK, INVALID = grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
FIELDS = (
    "texts",
    "what",
    "quantity",
    "layers",
    "heads",
    "dtype",
    "codec",
    "max_chunk_bytes",
    "CaptureRequest",
)
INT64 = st.integers(-(2**63), 2**63 - 1)
SETTINGS = settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)


@pytest.fixture(scope="module")
def shape_server(rel_engine):
    with running_server(ShapeEngine(rel_engine), max_texts=16, max_tokens=400) as (_, address):
        with grpc.insecure_channel(address) as channel:
            yield channel


def check_status(code, details, caps, n_texts) -> None:
    assert code in (OK, INVALID, EXHAUSTED), (code, details)
    if code == OK:
        assert len(caps) == n_texts
    else:
        assert details and any(f in details for f in FIELDS) or "server" in details, details
        assert len(details) <= 1024


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field, written by hand (any bytes, valid or not)."""
    out, n = bytearray([number << 3 | 2]), len(payload)
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]) + payload)


text_st = st.text(st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    ["", "\x00", "a\x00b", "\x01\x02\x1b[31m", "\u202e\ufeff", "\U0001f600" * 5, " " * 200]
)
request_st = st.fixed_dictionaries(
    {
        "texts": st.lists(text_st | st.tuples(text_st, text_st), max_size=20),
        "what": st.lists(
            st.sampled_from(list(QUANTITIES) + ["", "bogus", "ATTENTION", "\x00"]), max_size=12
        ),
        "layers": st.lists(st.integers(-2, 4) | INT64, max_size=5),
        "heads": st.lists(st.integers(-2, 4) | INT64, max_size=5),
        "dtype": st.integers(-1, 6) | st.integers(-(2**31), 2**31 - 1),
        "codec": st.integers(-1, 5) | st.integers(-(2**31), 2**31 - 1),
        "max_chunk_bytes": st.sampled_from([0, 1, 1023, 1024, 2**26, 2**26 + 1, 2**63, 2**64 - 1])
        | st.integers(0, 2**64 - 1),
        "truncate": st.booleans(),
    }
)


@SETTINGS
@given(request_st)
def test_every_field_fuzzed_gets_a_clear_status(shape_server, fields):
    texts = fields.pop("texts")
    code, details, caps = raw_capture(shape_server, request_bytes(texts, **fields), timeout=30)
    check_status(code, details, caps, len(texts))


@SETTINGS
@given(st.lists(st.binary(max_size=30), min_size=1, max_size=4), st.binary(max_size=30))
def test_text_bytes_that_are_not_utf8_are_refused(shape_server, texts, pair):
    body = b"".join(field(1, field(1, t)) for t in texts)
    body += field(1, field(1, b"a") + field(2, pair))
    code, details, caps = raw_capture(shape_server, body + field(2, b"attention"), timeout=30)
    valid = all(_utf8(t) for t in texts) and _utf8(pair)
    if not valid:
        assert code == INVALID and "UTF-8" in details, (code, details)
    check_status(code, details, caps, len(texts) + 1)


@SETTINGS
@given(st.binary(max_size=200))
def test_garbage_request_bytes_get_a_clear_status(shape_server, data):
    code, details, caps = raw_capture(shape_server, data, timeout=30)
    assert code in (OK, INVALID, EXHAUSTED), (code, details)


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def hostile_cases():
    big = "a " * (5 << 20)  # 10 MiB of text: over the 4 MiB message limit
    nasty = ["a\x00b c", "\x01\x02\x03 the cat", "\t\n\r\x0b\x0c", "\u202e the dog \ufeff"]
    yield "10 MiB string", request_bytes([big]), EXHAUSTED
    yield "1 MiB string", request_bytes(["the cat " * (1 << 17)]), INVALID
    yield "1 MiB string, truncate", request_bytes(["the cat " * (1 << 17)], truncate=True), OK
    yield "empty texts", request_bytes([]), INVALID
    yield "100k texts", request_bytes([""] * 100_000), EXHAUSTED
    yield "NUL and control characters", request_bytes(nasty), OK
    yield "invalid UTF-8", field(1, field(1, b"\xff\xfe the cat")), INVALID
    yield "negative layer", request_bytes(["a"], layers=[-1]), INVALID
    yield "huge layer", request_bytes(["a"], layers=[2**62]), INVALID
    yield "layer 2^32 + 1 (not cut to 1)", request_bytes(["a"], layers=[2**32 + 1]), INVALID
    yield "duplicate heads", request_bytes(["a"], heads=[1, 1]), INVALID
    yield "unknown dtype", request_bytes(["a"], dtype=99), INVALID
    yield "unknown codec", request_bytes(["a"], codec=-7), INVALID
    yield "chunk size 0 (the default)", request_bytes(["a"], max_chunk_bytes=0), OK
    yield "chunk size 2^63", request_bytes(["a"], max_chunk_bytes=2**63), INVALID
    yield "unknown quantity", request_bytes(["a"], what=["x" * 100_000]), INVALID
    yield "the same quantity 10^5 times", request_bytes(["a"], what=["attention"] * 100_000), OK
    yield "garbage", b"\xff" * 64, INVALID


def test_named_hostile_cases_then_right_answers(rel_engine, expected):
    with running_server(rel_engine, max_texts=64, max_tokens=2000) as (_, address):
        with grpc.insecure_channel(address) as channel:
            for name, data, want in hostile_cases():
                code, details, _ = raw_capture(channel, data, timeout=60)
                assert code == want, (name, code, details[:200])
                if code != OK:
                    assert details and len(details) <= 1024, name
            huge_metadata = (("x-junk", "y" * (32 << 10)),)
            code, _, _ = raw_capture(channel, request_bytes(["a"]), 10, huge_metadata)
            assert code == EXHAUSTED
            code, _, caps = raw_capture(channel, request_bytes(SENTENCES, WHAT), timeout=30)
            assert code == OK
            assert_right(caps, SENTENCES, expected)
