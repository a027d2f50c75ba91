"""CaptureRequest -> a validated (spec, tokenised examples, codec, chunk size).

Every field is checked before anything is queued or computed; a bad one raises
`RequestError` with INVALID_ARGUMENT (or RESOURCE_EXHAUSTED for a server limit)
and a message naming the field and its valid range. Quantity, layer, head and
dtype rules and messages are the engine's own (`Engine.make_spec`).
"""

from __future__ import annotations

import dataclasses

import grpc

from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import codecs

INVALID = grpc.StatusCode.INVALID_ARGUMENT
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED


# Status details travel in a trailer (HTTP/2 header): keep them far below
# gRPC's metadata limits, whatever a client put in the field they quote.
MAX_DETAILS = 1024


class RequestError(Exception):
    """A request the server refuses, with the status code to answer it with."""

    def __init__(self, code: grpc.StatusCode, message: str):
        if len(message) > MAX_DETAILS:
            message = f"{message[: MAX_DETAILS - 40]}... ({len(message)} characters)"
        super().__init__(message)
        self.code = code
        self.message = message


@dataclasses.dataclass(frozen=True)
class ParsedRequest:
    """A request that passed validation."""

    spec: object  # jaxattn.CaptureSpec
    tokenized: list
    codec: str
    max_chunk_bytes: int

    @property
    def tokens(self) -> int:
        return sum(e.length for e in self.tokenized)


def _enum(value: int, table: dict, enum_type, field: str):
    if value not in table:
        valid = ", ".join(f"{enum_type.Name(v)} ({v})" for v in sorted(table) if v)
        raise RequestError(INVALID, f"{field} {value} is not a valid {enum_type.DESCRIPTOR.name}:"
                                    f" valid values are {valid}")  # fmt: skip
    return table[value]


def _chunk_bytes(value: int) -> int:
    if value == 0:
        return codecs.DEFAULT_MAX_CHUNK_BYTES
    lo, hi = codecs.MIN_MAX_CHUNK_BYTES, codecs.MAX_MAX_CHUNK_BYTES
    if not lo <= value <= hi:
        raise RequestError(
            INVALID,
            f"max_chunk_bytes {value} is out of range: valid values are 0 (the default, "
            f"{codecs.DEFAULT_MAX_CHUNK_BYTES}) or {lo}..{hi}",
        )
    return value


class RequestParser:
    """Validates requests against one engine and the server's limits.

    Handler threads call `parse` concurrently: `Engine.tokenize` shares no
    mutable state between calls.
    """

    def __init__(self, engine, *, max_texts: int, max_tokens: int):
        self.engine = engine
        self.max_texts = max_texts
        self.max_tokens = max_tokens

    def parse(self, request: pb.CaptureRequest) -> ParsedRequest:
        """Validate `request` and tokenise its texts.

        Raises:
          RequestError: INVALID_ARGUMENT naming the bad field, or RESOURCE_EXHAUSTED
            for a request over max_texts or max_tokens.
        """
        n = len(request.texts)
        if n == 0:
            raise RequestError(INVALID, f"texts is empty: send 1 to {self.max_texts} texts")
        if n > self.max_texts:
            raise RequestError(EXHAUSTED, f"texts has {n} entries; this server accepts at most "
                                          f"{self.max_texts} per request")  # fmt: skip
        dtype = _enum(request.dtype, codecs.PB_TO_DTYPE, pb.Dtype, "dtype")
        precision = _enum(request.precision, codecs.PB_TO_PRECISION, pb.Precision, "precision")
        codec = _enum(request.codec, codecs.PB_TO_CODEC, pb.Codec, "codec")
        max_chunk_bytes = _chunk_bytes(request.max_chunk_bytes)
        try:
            spec = self.engine.make_spec(
                what=list(request.what) or None,
                layers=list(request.layers) or None,
                heads=list(request.heads) or None,
                dtype=dtype,
                precision=precision,  # None: the engine's default
            )
        except ValueError as e:
            raise RequestError(INVALID, str(e)) from e
        texts = [(t.text, t.text_pair) if t.HasField("text_pair") else t.text
                 for t in request.texts]  # fmt: skip
        try:
            tokenized = self.engine.tokenize(texts, truncate=request.truncate)
        except ValueError as e:
            raise RequestError(INVALID, str(e)) from e
        parsed = ParsedRequest(spec, tokenized, codec, max_chunk_bytes)
        if parsed.tokens > self.max_tokens:
            raise RequestError(EXHAUSTED, f"texts hold {parsed.tokens} tokens; this server accepts"
                                          f" at most {self.max_tokens} per request")  # fmt: skip
        return parsed
