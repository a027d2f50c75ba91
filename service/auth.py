"""Bearer-token authentication as a server interceptor.

Every call except the health service must carry `authorization: Bearer <token>`;
others are answered UNAUTHENTICATED before any handler runs. The comparison is
constant-time (hmac.compare_digest) so response timing reveals nothing about
the token. Neither the token nor the offered value is ever logged.
"""

from __future__ import annotations

import hmac

import grpc

# Load balancers and orchestrators probe health without credentials.
PUBLIC_PREFIXES = ("/grpc.health.v1.Health/",)


def _deny(request_or_iterator, context):
    context.abort(
        grpc.StatusCode.UNAUTHENTICATED,
        "missing or wrong bearer token: send metadata 'authorization: Bearer <token>'",
    )


def _denying_handler(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of the same streaming kind as `handler` that only denies."""
    kw = dict(request_deserializer=None, response_serializer=None)
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(_deny, **kw)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(_deny, **kw)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(_deny, **kw)
    return grpc.unary_unary_rpc_method_handler(_deny, **kw)


class BearerTokenInterceptor(grpc.ServerInterceptor):
    """Rejects calls without the right bearer token."""

    def __init__(self, token: str):
        self._expected = f"Bearer {token}".encode()

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(PUBLIC_PREFIXES):
            return handler
        offered = b""
        for key, value in handler_call_details.invocation_metadata or ():
            if key == "authorization":
                offered = value.encode() if isinstance(value, str) else value
                break
        if hmac.compare_digest(offered, self._expected):
            return handler
        return _denying_handler(handler)
