"""The server's CaptureRequest decoding and validation: the bytes a client sends ->
the servicer's tolerant deserializer -> `service.requests.RequestParser.parse`,
on a real (tiny) engine's tokenizer and spec rules; nothing is computed."""

from __future__ import annotations

from harness import checkpoint

from jaxattn.v1 import attention_pb2 as pb
from service.requests import RequestError, RequestParser
from service.servicer import Undecodable, _tolerant

DESIGNED = (RequestError,)
_decode = _tolerant(pb.CaptureRequest)
_parser = None


def prepare(engine=None) -> None:
    """The parser, on `engine` or a tiny one loaded once (its tokenizer and spec rules are
    what parse uses; nothing is compiled)."""
    global _parser
    if _parser is None:
        import jaxattn

        engine = engine or jaxattn.load(checkpoint(), buckets=(32,), max_batch=4)
        _parser = RequestParser(
            engine,
            max_texts=16,
            max_tokens=400,
            max_example_bytes=1 << 20,
            max_buffered_bytes=1 << 22,
            max_result_bytes=1 << 22,
        )


def seeds() -> list[bytes]:
    texts = [pb.Text(text="I went to the store."), pb.Text(text="a", text_pair="b")]
    requests = [
        pb.CaptureRequest(texts=texts),
        pb.CaptureRequest(
            texts=texts[:1],
            what=["attention", "alpha_fx_norm"],
            layers=[0, 2],
            heads=[1],
            dtype=pb.DTYPE_UINT8,
            codec=pb.CODEC_ZSTD,
            max_chunk_bytes=4096,
            truncate=True,
        ),
    ]
    return [r.SerializeToString() for r in requests]


def one_input(data: bytes) -> None:
    request = _decode(data)
    if isinstance(request, Undecodable):
        assert request.message, data
        return
    parsed = _parser.parse(request)
    assert len(parsed.tokenized) == len(request.texts) and parsed.tokens >= 1, parsed
