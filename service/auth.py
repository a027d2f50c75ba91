"""Bearer-token authentication as a server interceptor.

Every call except the health service must carry `authorization: Bearer <token>`,
once; others are answered UNAUTHENTICATED before any handler runs. A call that
carries the header more than once is refused whatever its values: no choice of
one of them (the first, the last, any that matches) may name the caller, so a
second header can never pick another client's quota. The comparison is
constant-time (hmac.compare_digest) so response timing reveals nothing about
the token. Neither the token nor the offered value is ever logged.

Two interceptors: `BearerTokenInterceptor` (one token, `--token-file`: one
anonymous client without limits) and `ClientInterceptor` (a token file of
named clients, `service.clients`), which hands the caller's `ClientQuota` to
the handler as `context.quota` (read it with `service.quotas.caller`).
"""

from __future__ import annotations

import functools
import hmac

import grpc

from service.clients import ClientTable

# Load balancers and orchestrators probe health without credentials.
PUBLIC_PREFIXES = ("/grpc.health.v1.Health/",)


WRONG_TOKEN = "missing or wrong bearer token: send metadata 'authorization: Bearer <token>'"
TWICE = "the 'authorization' header came more than once: send one, 'authorization: Bearer <token>'"


def _deny(request_or_iterator, context, message: str = WRONG_TOKEN):
    context.abort(grpc.StatusCode.UNAUTHENTICATED, message)


def _denying_handler(
    handler: grpc.RpcMethodHandler, message: str = WRONG_TOKEN
) -> grpc.RpcMethodHandler:
    """A handler of the same streaming kind as `handler` that only denies."""
    return _same_kind(handler, functools.partial(_deny, message=message), serializers=False)


def _same_kind(handler: grpc.RpcMethodHandler, behavior, *, serializers: bool):
    """A handler of `handler`'s streaming kind running `behavior` (with its
    serializers, or none: a handler that never reads or answers)."""
    kw = dict(request_deserializer=None, response_serializer=None)
    if serializers:
        kw = dict(
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(behavior, **kw)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(behavior, **kw)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(behavior, **kw)
    return grpc.unary_unary_rpc_method_handler(behavior, **kw)


def _offered(metadata) -> bytes | None:
    """The `authorization` value of a call's invocation metadata (b"" when absent);
    None when the header came more than once, whatever its values."""
    values = [value for key, value in metadata or () if key.lower() == "authorization"]
    if len(values) > 1:
        return None
    value = values[0] if values else b""
    return value.encode() if isinstance(value, str) else value


def _token(offered: bytes) -> bytes:
    """The token of an `authorization` value "Bearer <token>" (the scheme's name in any
    case, RFC 7235), or b"" for any other value."""
    scheme, _, token = offered.partition(b" ")
    return token if scheme.lower() == b"bearer" else b""


def client_name(clients, metadata) -> str:
    """The name of the client whose bearer token `metadata` carries ("" for none, an
    unknown or an expired token, or the header more than once): the `client` label of
    the metrics' refusals."""
    offered = _offered(metadata)
    token = _token(offered) if offered is not None else b""
    if not token:
        return ""
    quota, _ = clients.lookup(token)
    return "" if quota is None else quota.name


class BearerTokenInterceptor(grpc.ServerInterceptor):
    """Rejects calls without the right bearer token."""

    def __init__(self, token: str):
        self._expected = token.encode()

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(PUBLIC_PREFIXES):
            return handler
        offered = _offered(handler_call_details.invocation_metadata)
        if offered is None:
            return _denying_handler(handler, TWICE)
        if hmac.compare_digest(_token(offered), self._expected):
            return handler
        return _denying_handler(handler)


class ClientInterceptor(grpc.ServerInterceptor):
    """Admits the clients of a token file; the handler sees the caller's quota.

    An unknown token, a missing one, an expired one and a header sent more than
    once are UNAUTHENTICATED (the expired one says it expired, the repeated one
    that it came more than once). A known client's call runs the method with a
    context whose `quota` is the client's `ClientQuota`.
    """

    def __init__(self, clients: ClientTable):
        self.clients = clients

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(PUBLIC_PREFIXES):
            return handler
        offered = _offered(handler_call_details.invocation_metadata)
        if offered is None:
            return _denying_handler(handler, TWICE)
        token = _token(offered)
        quota, expired = self.clients.lookup(token) if token else (None, "")
        if quota is None:
            return _denying_handler(handler, expired or WRONG_TOKEN)
        method = (
            handler.unary_unary
            or handler.unary_stream
            or handler.stream_unary
            or handler.stream_stream
        )
        return _same_kind(
            handler,
            lambda request, context: method(request, CallerContext(context, quota)),
            serializers=True,
        )


class CallerContext:
    """A call's `grpc.ServicerContext` with the caller's quota attached (`quota`)."""

    def __init__(self, context, quota):
        self._context = context
        self.quota = quota

    def __getattr__(self, name):
        return getattr(self._context, name)
