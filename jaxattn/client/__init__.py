"""The Python client of the jaxattn attention service (numpy + grpc; no jax, flax, torch).

    from jaxattn.client import AttentionClient, AttentionServiceError
    with AttentionClient("127.0.0.1:50051") as client:
        client.model_info()                          # name, layers, heads, ...
        caps = client.capture(
            ["I went to the store.",
             ("I went to the store.", "At the store, I bought fresh strawberries.")],
            what=("attention", "alpha_fx_norm"), dtype="uint8", codec="zstd")
        caps[1].attention                            # numpy [L, H, T, T], as from the engine
        for cap in client.stream(many_texts):        # each example as it arrives
            ...
        for cap in client.capture_iter(open("corpus.txt"), too_long="skip"):
            ...                                      # any iterable, bounded memory

Several replicas: `AttentionClient(["a:50051", "b:50051"])` or one
"dns:///name:50051" (round-robin, NOT_SERVING replicas skipped, a cut stream
resumed on another replica of the same weights; docs/replicas.md).
Captures carry `text`, `truncated` and `provenance` (source "server HOST:PORT").
A decoder's server continues texts first with `generate=N` (as `Engine.capture`:
the captures' `generated_start` marks the continuation and `stop` says why it ended;
`server_info().max_new_tokens` says how many tokens it generates, 0: none, and
`server_info().eos_ids` the tokens it stops at).
Layers and heads take the engine's selections (-1, slices, "0,3,-1"). Failures
raise `AttentionServiceError` with the gRPC status code, message, and the
refused request `field` / server `limit` when the server names them.
A client-only install: `pip install "jaxattn[client]"`.

Modules: `client` (`AttentionClient`), `request` (its arguments -> one checked
`CaptureRequest`), `channels` (TLS, token, round-robin, health, retries),
`resume` (a cut stream's progress, resumed on another replica), `served_model`
(a replica's GetModelInfo as `ModelInfo`, and its captures' provenance),
`errors` (`AttentionServiceError`).
"""

from jaxattn.client.client import AttentionClient
from jaxattn.client.errors import AttentionServiceError

__all__ = ["AttentionClient", "AttentionServiceError"]
