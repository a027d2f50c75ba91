"""Every bad request field is refused with a status code and a message naming the field."""

from __future__ import annotations

import grpc
import pytest
from service_support import WHAT

from jaxattn.errors import UsageError
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.v1 import attention_pb2_grpc as pb_grpc

INVALID = grpc.StatusCode.INVALID_ARGUMENT
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
OK_TEXT = pb.Text(text="the cat sat on the mat")
LONG = " ".join(["the cat sat on the mat"] * 12)  # > 67 tokens


@pytest.fixture(scope="module")
def stub(address):
    with grpc.insecure_channel(address) as channel:
        yield pb_grpc.AttentionServiceStub(channel)


def call(stub, **fields):
    fields.setdefault("texts", [OK_TEXT])
    fields.setdefault("what", list(WHAT))
    return list(stub.Capture(pb.CaptureRequest(**fields), timeout=30))


# case: (request fields, status code, words of the message, jaxattn-field, jaxattn-limit)
CASES = {
    "empty texts": (dict(texts=[]), INVALID, ["texts is empty", "1 to 64"], "texts", None),
    "too many texts": (
        dict(texts=[OK_TEXT] * 65),
        EXHAUSTED,
        ["texts", "65", "at most 64"],
        "texts",
        "max_texts",
    ),
    "too many tokens": (
        dict(texts=[pb.Text(text=LONG[:150])] * 60),
        EXHAUSTED,
        ["tokens", "at most 1500"],
        "texts",
        "max_tokens",
    ),
    "text too long": (
        dict(texts=[OK_TEXT, pb.Text(text=LONG)]),
        INVALID,
        ["texts[1] is 74 tokens", "limit of 67", "set truncate in CaptureRequest"],
        "texts[1]",
        None,
    ),
    "unknown quantity": (
        dict(what=["attention", "attn"]),
        INVALID,
        ["'attn'", "what", "scores"],
        "what[1]",
        None,
    ),
    "a quantity of another family": (
        dict(what=["attention", "scores_c2p"]),
        INVALID,
        ["what[1] 'scores_c2p' is not computed by this model", "ModelInfo.quantities"],
        "what[1]",
        None,
    ),
    "layer too big": (dict(layers=[0, 3]), INVALID, ["layers", "3", "0..2"], "layers[1]", None),
    "negative layer": (dict(layers=[-1]), INVALID, ["layers", "-1", "0..2"], "layers[0]", None),
    "duplicate layers": (dict(layers=[1, 1]), INVALID, ["layers", "duplicate"], "layers[1]", None),
    "head too big": (dict(heads=[7]), INVALID, ["heads", "7", "0..2"], "heads[0]", None),
    "duplicate heads": (dict(heads=[0, 2, 0]), INVALID, ["heads", "duplicate"], "heads[2]", None),
    "uint8 statistics": (
        dict(what=["head_stats"], dtype=pb.DTYPE_UINT8),
        INVALID,
        ["head_stats", "uint8", "float16"],
        "dtype",
        None,
    ),
    "unknown dtype": (
        dict(dtype=99),
        INVALID,
        ["dtype 99", "DTYPE_FLOAT32 (1)", "DTYPE_UINT8"],
        "dtype",
        None,
    ),
    "unknown codec": (dict(codec=7), INVALID, ["codec 7", "CODEC_ZSTD (2)"], "codec", None),
    "unknown precision": (
        dict(precision=9),
        INVALID,
        ["precision 9", "PRECISION_TF32 (2)"],
        "precision",
        None,
    ),
    "query position past a text": (
        dict(texts=[OK_TEXT, pb.Text(text="a")], query_positions=[-1, -4]),
        INVALID,
        ["query_positions position -4 (query_positions[1])", "outside texts[1] of 3 tokens"],
        "query_positions[1]",
        None,
    ),
    "duplicate query positions": (
        dict(query_positions=[-1, 2, -1]),
        INVALID,
        ["query_positions position -1", "duplicate of query_positions[0]"],
        "query_positions[2]",
        None,
    ),
    "key positions naming one token": (
        dict(key_positions=[0, -8]),
        INVALID,
        ["key_positions[1]", "token 0 of texts[0] (8 tokens)", "key_positions[0] 0 does"],
        "key_positions[1]",
        None,
    ),
    "positions of no map": (
        dict(what=["head_stats"], key_positions=[0]),
        INVALID,
        ["key_positions selects rows or keys of the maps", "asks for none (head_stats)"],
        "key_positions",
        None,
    ),
    "more positions than the model's tokens": (
        dict(query_positions=list(range(68))),
        INVALID,
        ["68 positions", "the model's longest input (67 tokens)"],
        "query_positions",
        None,
    ),
    "chunk size too small": (
        dict(max_chunk_bytes=1023),
        INVALID,
        ["max_chunk_bytes 1023", "1024..67108864"],
        "max_chunk_bytes",
        None,
    ),
    "chunk size too big": (
        dict(max_chunk_bytes=2**32 - 1),
        INVALID,
        ["max_chunk_bytes", "67108864"],
        "max_chunk_bytes",
        None,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_field_is_refused_named_and_tagged(stub, case):
    fields, code, words, field, limit = CASES[case]
    with pytest.raises(grpc.RpcError) as info:
        call(stub, **fields)
    assert info.value.code() == code, info.value.details()
    for word in words:
        assert word in info.value.details()
    trailers = dict(info.value.trailing_metadata())
    assert trailers.get("jaxattn-field") == field
    assert trailers.get("jaxattn-limit") == limit
    for python_ism in ("too_long=", "=True", "pass ", "give None"):
        assert python_ism not in info.value.details()


def test_truncate_accepts_the_long_text(stub):
    messages = call(stub, texts=[pb.Text(text=LONG)], truncate=True)
    assert len(messages[0].header.tokens) == 67


def test_the_server_still_answers_after_refusals(client):
    (cap,) = client.capture(["the cat sat on the mat"], what=WHAT)
    assert cap.tokens[0] == "[CLS]"


def test_client_checks_its_own_arguments_before_calling(client):
    with pytest.raises(UsageError, match="dtype"):
        client.capture(["a"], dtype="float64")
    with pytest.raises(UsageError, match="codec"):
        client.capture(["a"], codec="gzip")
    with pytest.raises(UsageError, match=r"texts\[1\]"):
        client.capture(["a", 3])
    with pytest.raises(UsageError, match="wrap it in a list"):
        client.capture("a sentence")


def test_client_raises_its_own_error_type(client):
    from jaxattn.client import AttentionServiceError

    with pytest.raises(AttentionServiceError) as info:
        client.capture(["the cat"], what=WHAT, layers=[5])
    assert info.value.code == INVALID
    assert "layers index 5" in info.value.message
    assert info.value.field == "layers[0]" and info.value.limit is None


def test_undecodable_request_bytes_are_invalid_argument(address):
    # texts[0].text = b"\xff\xfe" : not UTF-8, which proto3 strings must be.
    text = b"\x0a\x02\xff\xfe"
    raw = b"\x0a" + bytes([len(text)]) + text
    with grpc.insecure_channel(address) as channel:
        rpc = channel.unary_stream(
            "/jaxattn.v1.AttentionService/Capture",
            request_serializer=None,
            response_deserializer=None,
        )
        with pytest.raises(grpc.RpcError) as info:
            list(rpc(raw, timeout=10))
    assert info.value.code() == INVALID
    assert "not a valid jaxattn.v1.CaptureRequest" in info.value.details()
    assert "UTF-8" in info.value.details()
    with grpc.insecure_channel(address) as channel:
        rpc = channel.unary_unary(
            "/jaxattn.v1.AttentionService/GetModelInfo",
            request_serializer=None,
            response_deserializer=None,
        )
        with pytest.raises(grpc.RpcError) as info:
            rpc(b"\xff\xff\xff", timeout=10)
    assert info.value.code() == INVALID  # gRPC's own deserializer failure is INTERNAL
    assert "not a valid jaxattn.v1.GetModelInfoRequest" in info.value.details()


def test_an_unknown_quantity_is_offered_only_this_models_names(stub):
    with pytest.raises(grpc.RpcError) as info:
        call(stub, what=["attn"])
    details = info.value.details()
    assert "what[0] 'attn' is not a quantity" in details and "alpha_fx_norm" in details
    assert "scores_c2p" not in details  # DeBERTa's: this BERT refuses it


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(what="attn"), "unknown quantity 'attn'"),
        (dict(what="attention,queries"), "unknown quantity 'attention,queries'"),
        (dict(what=()), "no quantity asked for"),
        (dict(what="head_stats", dtype="uint8"), "head_stats cannot be uint8"),
        (dict(max_chunk_bytes=-5), "max_chunk_bytes -5 is out of range"),
        (dict(max_chunk_bytes=2**70), "valid are None .* or 1024..67108864"),
        (dict(max_chunk_bytes=10), "max_chunk_bytes 10"),
        (dict(timeout=-1), "timeout must be a positive number"),
        (dict(timeout=0), "timeout must be a positive number"),
    ],
)
def test_the_client_refuses_what_the_engine_refuses_without_a_call(kwargs, words):
    """Nothing listens at the address: a call would fail UNAVAILABLE, not UsageError."""
    from jaxattn.client import AttentionClient
    from jaxattn.errors import UsageError

    with AttentionClient("127.0.0.1:9", timeout=5.0) as c, pytest.raises(UsageError, match=words):
        c.capture(["a"], **kwargs)
