"""The client's one error type: what failed, as a gRPC status code and a message."""

from __future__ import annotations

import grpc

from jaxattn.errors import ServerError


class AttentionServiceError(ServerError):
    """A call to the attention service failed.

    Attributes:
      code: the `grpc.StatusCode` (INVALID_ARGUMENT, RESOURCE_EXHAUSTED,
        UNAUTHENTICATED, DEADLINE_EXCEEDED, UNAVAILABLE, INTERNAL, ...;
        DATA_LOSS when a received chunk fails its checksum or the protocol).
      message: the server's (or the client's) explanation.
      address: the server address the failing attempt went to, if known.
    """

    def __init__(self, code: grpc.StatusCode, message: str, address: str | None = None):
        self.code = code
        self.message = message
        self.address = address
        where = f" ({address})" if address else ""
        super().__init__(f"{code.name}: {message}{where}")

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError, address: str | None = None):
        code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
        details = error.details() if hasattr(error, "details") else str(error)
        return cls(code or grpc.StatusCode.UNKNOWN, details or "", address)
