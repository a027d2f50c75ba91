"""Output limits: a request whose output cannot fit is refused up front, with the numbers.

The shared tiny engine (3 layers x 3 heads, buckets 32 and 67 = max_positions):
attention of one example padded to 67 is 3 * 3 * 67 * 67 * 4 = 161,604 bytes at
float32 (40,401 at uint8), padded to 32 it is 3 * 3 * 32 * 32 * 4 = 36,864; with
max_example_bytes = 50,000 texts up to 32 tokens fit and longer ones do not: even
one layer's attention at 67 (53,868, a layer group, service/limits.py) is over it
(tests/service/test_service_layer_groups.py serves a limit a layer fits).
"""

from __future__ import annotations

import grpc
import pytest
from service_support import running_server

from jaxattn.errors import UsageError
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.v1 import attention_pb2_grpc as pb_grpc

LONG = "the cat sat on the mat " * 6  # 38 tokens: padded to 67
SHORT = "the cat sat on the mat"
LIMIT = 50_000


@pytest.fixture(scope="module")
def limited(svc_engine):
    with running_server(svc_engine, max_example_bytes=LIMIT, max_result_bytes=150_000) as s:
        yield s[1]


def capture(address, texts, **fields):
    request = pb.CaptureRequest(texts=[pb.Text(text=t) for t in texts], **fields)
    with grpc.insecure_channel(address) as channel:
        return list(pb_grpc.AttentionServiceStub(channel).Capture(request, timeout=60))


def refused(address, texts, **fields) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        capture(address, texts, **fields)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    return info.value


def test_an_example_over_the_limit_is_refused_with_the_numbers(limited, svc_engine):
    assert svc_engine.tokenize([LONG])[0].length == 38
    error = refused(limited, [SHORT, LONG], what=["attention"])
    message = error.details()
    trailers = dict(error.trailing_metadata())
    assert trailers["jaxattn-limit"] == "max_example_bytes"
    assert trailers["jaxattn-field"] == "texts[1]"
    for words in (
        "texts[1] (38 tokens, padded to 67)",
        "161.6 kB",  # 3 * 3 * 67 * 67 * 4
        "53.9 kB a layer group",  # one layer's
        "at most 50.0 kB per example, or per layer group of one",
        "texts up to 32 tokens fit",
        "head_stats",
        "uint8",
    ):
        assert words in message, (words, message)


def test_what_the_refusal_suggests_is_served(limited):
    # statistics do not grow with T^2; uint8 attention is 40,401 bytes
    assert capture(limited, [LONG], what=["head_stats"])
    assert capture(limited, [LONG], what=["attention"], dtype=pb.DTYPE_UINT8)
    assert capture(limited, [LONG], what=["attention"], layers=[0], heads=[1])
    assert capture(limited, [SHORT], what=["attention"])  # within the limit


def test_a_request_over_the_result_limit_is_refused(limited, svc_engine):
    n = [e.length for e in svc_engine.tokenize([LONG] * 4)][0]
    per_text = 3 * 3 * n * n  # uint8: 12,996 bytes each, 12 of them = 155,952 > 150,000
    assert 11 * per_text <= 150_000 < 12 * per_text
    assert capture(limited, [LONG] * 11, what=["attention"], dtype=pb.DTYPE_UINT8)
    error = refused(limited, [LONG] * 12, what=["attention"], dtype=pb.DTYPE_UINT8)
    assert dict(error.trailing_metadata())["jaxattn-limit"] == "max_result_bytes"
    assert "156.0 kB" in error.details() and "150.0 kB per request" in error.details()


def test_model_info_reports_the_limits_and_the_longest_texts(limited):
    from jaxattn.client import AttentionClient

    with AttentionClient(limited, timeout=30.0) as client:
        info = client.server_info()
    assert info.max_example_bytes == LIMIT
    assert info.max_result_bytes == 150_000
    assert info.longest_text_attention == 32  # 36,864 fits, 161,604 does not
    assert info.longest_text_statistics == 67  # max_positions


def test_smaller_result_buffers_bound_an_example_and_are_named(svc_engine):
    with running_server(svc_engine, max_buffered_bytes=50_000, max_tokens=40) as (_, address):
        from jaxattn.client import AttentionClient

        with AttentionClient(address, timeout=30.0) as client:
            info = client.server_info()
        assert info.max_example_bytes == 50_000
        assert info.longest_text_attention == 32
        assert info.longest_text_statistics == 40  # max_tokens is smaller than max_positions
        error = refused(address, [LONG], what=["attention"])
        assert dict(error.trailing_metadata())["jaxattn-limit"] == "max_buffered_bytes"


def test_longest_agrees_with_every_length(svc_engine):
    from service.limits import OutputLimits

    limits = OutputLimits(svc_engine, max_example_bytes=LIMIT, max_result_bytes=30_000)
    spec = svc_engine.make_spec(what=["attention"])
    # real lengths: result bytes 3 * 3 * n * n * 4 <= 30,000 up to n = 28; padded all fit to 32
    expected = max(n for n in range(68) if n <= 32 and 36 * n * n <= 30_000)
    assert limits.longest(spec, 67) == expected == 28


@pytest.mark.parametrize("name", ["max_example_bytes", "max_result_bytes"])
def test_options_refuse_a_zero_limit(name):
    from service import ServerOptions

    with pytest.raises(UsageError, match=name):
        ServerOptions(**{name: 0})


@pytest.mark.parametrize("name", ["max_texts", "max_tokens", "max_new_tokens"])
def test_options_refuse_a_limit_model_info_cannot_carry(name):
    """ModelInfo carries these as uint32: past that, every GetModelInfo failed (UNKNOWN)."""
    from service import ServerOptions

    ServerOptions(**{name: (1 << 32) - 1})
    with pytest.raises(UsageError, match=f"{name} must be at most 4294967295"):
        ServerOptions(**{name: 1 << 32})
