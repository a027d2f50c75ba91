"""An in-process jaxattn server on a free loopback port, for the service and reliability
tests (`tests/` is on sys.path: `from local_server import running_server`)."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def running_server(engine, **options):
    """A started in-process server on a free loopback port; yields (server, address)."""
    from service import create_server

    options.setdefault("max_batch_examples", 8)
    options.setdefault("grace_s", 2.0)
    server, port = create_server(engine, "127.0.0.1:0", **options)
    server.start()
    try:
        yield server, f"127.0.0.1:{port}"
    finally:
        server.stop(grace=0.5).wait(10)


@contextlib.contextmanager
def fake_service(capture, info):
    """A stand-in AttentionService on a free loopback port: `capture(request, context)`
    yields serialised CaptureResponse bytes, `info(request, context)` returns a
    ModelInfo; yields the address. For scripting what a server sends."""
    from concurrent import futures

    import grpc

    from jaxattn.v1 import attention_pb2 as pb

    server = grpc.server(futures.ThreadPoolExecutor(4))
    handlers = {
        "Capture": grpc.unary_stream_rpc_method_handler(
            capture, request_deserializer=pb.CaptureRequest.FromString, response_serializer=None
        ),
        "GetModelInfo": grpc.unary_unary_rpc_method_handler(
            info,
            request_deserializer=pb.GetModelInfoRequest.FromString,
            response_serializer=pb.ModelInfo.SerializeToString,
        ),
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("jaxattn.v1.AttentionService", handlers),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(0)
