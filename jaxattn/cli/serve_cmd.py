"""`jaxattn serve`: run the gRPC attention service until SIGTERM/SIGINT.

The server itself is the `service` package, outside jaxattn. This module is the
one place jaxattn reaches it, lazily and through narrow functions: `_run`
builds `service.ServerOptions` from the flags (reading the token, token file
and certificate files) and calls `service.serve`; `start_server` serves an engine
in-process (for `jaxattn demo`); `queue_size` checks --queue-size against the
server's most (`service.options.MAX_QUEUE_SIZE`), only when the flag is given.
"""

from __future__ import annotations

import argparse

from jaxattn.cli.args import (
    add_precision_argument,
    add_source_arguments,
    at_most,
    engine_options,
    mebibytes,
    names,
    non_negative,
    non_negative_float,
    port,
    positive,
    positive_float,
    read_flag_file,
    read_token,
    wire_count,
)
from jaxattn.engine.batching import WARMUP_SIZES
from jaxattn.errors import UsageError
from jaxattn.netaddr import listen_address
from jaxattn.spec import check_quantity

_MiB = 1 << 20


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "serve",
        help="serve attention captures over gRPC",
        description="Serve jaxattn.v1.AttentionService (plus health and reflection) on one "
        "port until SIGTERM or Ctrl-C, then drain in-flight calls and exit. Prints "
        "'listening on HOST:PORT' once ready.",
    )
    add_arguments(p)
    p.set_defaults(func=_run)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_source_arguments(p, server=False)
    add_precision_argument(p, default="highest")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to bind (default 127.0.0.1: this machine only)",
    )
    p.add_argument("--port", type=port, default=50051, help="port; 0 picks a free one")
    p.add_argument(
        "--metrics-port",
        type=port,
        default=None,
        help="serve Prometheus metrics at http://HOST:PORT/metrics on this port of --host "
        "(plain HTTP, no token; 0 picks a free one, printed). Default: no metrics endpoint",
    )
    p.add_argument("--max-texts", type=wire_count(1), default=1024, help="most texts per request")
    p.add_argument(
        "--max-tokens", type=wire_count(1), default=131072, help="most tokens per request"
    )
    p.add_argument(
        "--max-new-tokens",
        type=wire_count(0),
        default=256,
        help="most tokens one request may ask a decoder to generate before its capture "
        "(CaptureRequest.generate); 0: no generation",
    )
    p.add_argument(
        "--queue-size",
        type=queue_size,
        default=64,
        help="most requests admitted at once; more get RESOURCE_EXHAUSTED (each holds "
        "a handler thread: a value past the server's most is refused, naming it)",
    )
    p.add_argument(
        "--batch-window-ms",
        type=non_negative_float,
        default=5.0,
        help="how long a request waits for others to share its batch",
    )
    p.add_argument(
        "--max-batch", type=positive, default=64, help="most examples merged into one engine call"
    )
    p.add_argument(
        "--no-micro-batching", action="store_true", help="run every request in its own engine call"
    )
    p.add_argument(
        "--join-generations",
        choices=("auto", "on", "off"),
        default="auto",
        help="a generating request joins a generation under way (continuous batching): "
        "auto (default) on a GPU/TPU, not on the CPU",
    )
    p.add_argument("--tls-cert", metavar="PEM", help="certificate chain (serve TLS only)")
    p.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="require 'authorization: Bearer <token>' with the token in FILE "
        "(or set $JAXATTN_TOKEN; never pass a token on the command line)",
    )
    p.add_argument(
        "--tokens",
        metavar="FILE",
        help="instead of one token: a TOML file of named clients, each with its "
        "own token and quotas (requests/s, tokens/s, concurrent calls, result "
        "MiB); re-read on SIGHUP. Format: docs/server.md, 'Clients and quotas'",
    )
    p.add_argument(
        "--max-request-mib",
        type=mebibytes("int32"),
        default=4.0,
        help="largest request message; larger get RESOURCE_EXHAUSTED",
    )
    p.add_argument(
        "--request-buffer-mib",
        type=positive_float,
        default=64.0,
        help="most unsent result MiB per call: beyond it the engine waits "
        "for that client to read (flow control)",
    )
    p.add_argument(
        "--max-buffered-mib",
        type=mebibytes("uint64"),
        default=1024.0,
        help="most result MiB all calls may hold together (reserved at "
        "admission; RESOURCE_EXHAUSTED beyond)",
    )
    p.add_argument(
        "--max-example-mib",
        type=mebibytes("uint64"),
        default=4096.0,
        help="most output MiB one example may return, padded to its length "
        "bucket (what the device holds for it); a larger example of several "
        "layers is computed and sent a layer group within it at a time, and "
        "one whose single layer is larger is refused before any compute "
        "(RESOURCE_EXHAUSTED, with the numbers)",
    )
    p.add_argument(
        "--max-result-mib",
        type=mebibytes("uint64"),
        default=65536.0,
        help="most output MiB one request may return, all its texts together",
    )
    p.add_argument(
        "--slow-reader-s",
        type=positive_float,
        default=30.0,
        help="cancel a call whose client reads nothing for this long",
    )
    p.add_argument(
        "--grace",
        type=non_negative_float,
        default=30.0,
        help="seconds in-flight calls get to finish on SIGTERM",
    )
    p.add_argument(
        "--warmup",
        type=quantity_names,
        metavar="WHAT",
        action="append",
        help="before listening, compile the program of one kind of request: "
        "these comma-separated quantities together, all layers and heads, "
        "float32, the server's precision (a request for exactly that then "
        "compiles nothing; any other selection or dtype compiles on first "
        "use; a decoder server that generates also compiles its generation "
        "steps). Repeat for more kinds: --warmup attention "
        "--warmup attention,queries,keys",
    )
    p.add_argument(
        "--warmup-sizes",
        choices=WARMUP_SIZES,
        default=None,
        help="with --warmup: every batch size of every length bucket (all, "
        "default), or the largest per bucket, smaller batches padded into it "
        "until that padding has cost a compile (largest: where compiles take "
        "seconds, GPUs)",
    )
    p.add_argument(
        "--malloc-arenas",
        type=non_negative,
        default=None,
        help="cap glibc's malloc arenas (default 2; 0: glibc's own, 8 per "
        "core): each thread's arena keeps what it freed, and a server's "
        "hundred threads freeing large answers would hold far more than "
        "they use. $MALLOC_ARENA_MAX, if set, wins",
    )
    p.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="logging level (INFO: one line per request)",
    )


def queue_size(value: str) -> int:
    """--queue-size: 1..`service.options.MAX_QUEUE_SIZE`."""
    from service.options import MAX_QUEUE_SIZE, QUEUE_SIZE_BOUND

    return at_most(positive(value), MAX_QUEUE_SIZE, QUEUE_SIZE_BOUND)


def quantity_names(value: str) -> tuple[str, ...]:
    """`names`, each a known quantity: a typo stops the command before the model loads."""
    out = names(value)
    try:
        for name in out:
            check_quantity(name)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return out


def _read(flag: str, path: str | None) -> bytes | None:
    return None if path is None else read_flag_file(flag, path)


def server_options(args: argparse.Namespace):
    """The `service.ServerOptions` the flags ask for."""
    from service import ServerOptions

    if (args.tls_cert is None) != (args.tls_key is None):
        raise UsageError("--tls-cert and --tls-key go together: give both or neither")
    token = read_token(args.token_file)
    clients = None
    if args.tokens:
        if token is not None:
            raise UsageError(
                "--tokens names every client's token: give it without --token-file "
                "(and unset $JAXATTN_TOKEN)"
            )
        from service.clients import ClientTable

        try:  # a malformed file stops here, before the model loads
            clients = ClientTable(args.tokens)
        except OSError as e:
            raise UsageError(f"--tokens: cannot read {args.tokens!r}: {e.strerror or e}") from None
    return ServerOptions(
        max_texts=args.max_texts,
        max_tokens=args.max_tokens,
        max_new_tokens=args.max_new_tokens,
        queue_size=args.queue_size,
        batch_window_s=args.batch_window_ms / 1e3,
        max_batch_examples=args.max_batch,
        micro_batching=not args.no_micro_batching,
        join_generations={"auto": None, "on": True, "off": False}[args.join_generations],
        token=token,
        clients=clients,
        tls_cert=_read("--tls-cert", args.tls_cert),
        tls_key=_read("--tls-key", args.tls_key),
        grace_s=args.grace,
        max_request_bytes=int(args.max_request_mib * _MiB),
        request_buffer_bytes=int(args.request_buffer_mib * _MiB),
        max_buffered_bytes=int(args.max_buffered_mib * _MiB),
        max_example_bytes=max(1, int(args.max_example_mib * _MiB)),
        max_result_bytes=max(1, int(args.max_result_mib * _MiB)),
        slow_reader_s=args.slow_reader_s,
        metrics_port=args.metrics_port,
    )


def start_server(engine, address: str = "127.0.0.1:0", **options):
    """Serve `engine` in this process: (server, port), started; `server.stop(grace)` ends it."""
    from service import create_server

    server, port = create_server(engine, address, **options)
    server.start()
    return server, port


def _run(args) -> int:
    if args.warmup_sizes is not None and not args.warmup:
        raise UsageError("--warmup-sizes needs --warmup WHAT: the quantities to compile for")
    from service import serve

    return serve(
        args.model,
        listen_address(args.host, args.port),
        server_options(args),
        log_level=args.log_level,
        precision=args.precision,
        **engine_options(args),
        warmup=args.warmup or (),
        warmup_sizes=args.warmup_sizes or "all",
        malloc_arenas=args.malloc_arenas,
    )
