"""The client's one error type: what failed, as a gRPC status code and a message."""

from __future__ import annotations

import grpc

from jaxattn.errors import ServerError, in_terms

# Trailing metadata keys of a refusal (attention.proto, "Machine-readable errors").
FIELD_KEY = "jaxattn-field"
LIMIT_KEY = "jaxattn-limit"
RETRY_AFTER_KEY = "retry-after-ms"


class AttentionServiceError(ServerError):
    """A call to the attention service failed.

    Attributes:
      code: the `grpc.StatusCode` (INVALID_ARGUMENT, RESOURCE_EXHAUSTED,
        UNAUTHENTICATED, DEADLINE_EXCEEDED, UNAVAILABLE, INTERNAL, ...;
        DATA_LOSS when a received chunk fails its checksum or the protocol).
      message: the server's (or the client's) explanation, as the server sent it
        (``str(error)`` gives its advice in the Python client's terms: ``too_long=``).
      address: the server address the failing attempt went to, if known.
      field: the CaptureRequest field the server refused ("texts[3]", "layers[0]",
        "what[1]", "dtype", ...: its `jaxattn-field` trailer), or None.
      limit: the server limit that was hit ("max_texts", "max_tokens",
        "queue_size", "max_example_bytes", ...; a client quota: "requests_per_s",
        "tokens_per_s", "concurrent_calls", "result_mib", "result_mib_per_s":
        its `jaxattn-limit` trailer), or None.
      retry_after_s: how long the server says to wait before the same request
        would pass (its `retry-after-ms` trailer, in seconds), or None.
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        address: str | None = None,
        *,
        field: str | None = None,
        limit: str | None = None,
        retry_after_s: float | None = None,
    ):
        self.code = code
        self.message = message
        self.address = address
        self.field = field
        self.limit = limit
        self.retry_after_s = retry_after_s
        where = f" ({address})" if address else ""
        super().__init__(f"{code.name}: {in_terms(message, 'python')}{where}")

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError, address: str | None = None):
        code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
        details = error.details() if hasattr(error, "details") else str(error)
        trailers = _trailers(error)
        return cls(
            code or grpc.StatusCode.UNKNOWN,
            details or "",
            address,
            field=trailers.get(FIELD_KEY),
            limit=trailers.get(LIMIT_KEY),
            retry_after_s=_seconds(trailers.get(RETRY_AFTER_KEY)),
        )


def _seconds(milliseconds: str | None) -> float | None:
    """A `retry-after-ms` value in seconds (None when absent, not a number, or past
    any float: a server's trailer is not trusted to be sane)."""
    try:
        return max(0.0, int(milliseconds) / 1e3) if milliseconds is not None else None
    except (ValueError, OverflowError):  # "x"; 10**400 is past a float
        return None


def _trailers(error: grpc.RpcError) -> dict[str, str]:
    """The error's trailing metadata as a dict of its text entries ({} when it has none)."""
    try:
        metadata = error.trailing_metadata() or ()
    except Exception:  # an RpcError that is no call (a test double, a channel failure)
        return {}
    return {k: v for k, v in metadata if isinstance(v, str)}
