"""The jaxattn gRPC server: AttentionService, health and reflection over one engine.

    import jaxattn
    from service import create_server
    server, port = create_server(jaxattn.load(), "127.0.0.1:0")
    server.start()
    ...
    server.stop(grace=10).wait()

From the shell: `jaxattn serve --port 50051` (see `jaxattn serve --help`),
which calls `serve` (the one entry point the jaxattn CLI uses).
The contract is protos/jaxattn/v1/attention.proto.

Modules: `options` (ServerOptions), `server` (create_server, the drain),
`servicer` (the RPC handlers), `requests` (validating a CaptureRequest),
`admission` (what a request reserves; RESOURCE_EXHAUSTED), `generation` (a
request's continuation, a step per batcher turn), `generation_turns` (when a
generating call takes a step: joins a run under way, merges, waits for a cache
slot), `limits` (output limits checked before any compute), `micro_batching` and
`admitted_call` (micro-batching, flow control), `grouped_runs` (a run between its
layer groups: suspended, resumed, preempted), `prefetch` (encoding ahead of gRPC),
`auth` (the bearer token; the clients of a token file), `clients` (the token file),
`quotas` (per-client token buckets), `metrics` (the Prometheus endpoint), `health`
(grpc.health.v1), `allocator` (malloc arenas), `main` (`serve`).
"""

from service.main import serve
from service.options import ServerOptions
from service.server import AttentionServer, create_server

__all__ = ["AttentionServer", "ServerOptions", "create_server", "serve"]
