"""The jaxattn gRPC server: AttentionService, health and reflection over one engine.

    import jaxattn
    from service import create_server
    server, port = create_server(jaxattn.load(), "127.0.0.1:0")
    server.start()
    ...
    server.stop(grace=10).wait()

From the shell: `jaxattn serve --port 50051` (see `jaxattn serve --help`).
The contract is protos/jaxattn/v1/attention.proto.
"""

from service.options import ServerOptions
from service.server import AttentionServer, create_server

__all__ = ["AttentionServer", "ServerOptions", "create_server"]
