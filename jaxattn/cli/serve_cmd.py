"""`jaxattn serve`: run the gRPC attention service until SIGTERM/SIGINT.

The server itself is the `service` package (`service.create_server`); this
module only parses options and calls `service.main.serve`, lazily, so the CLI
stays the one place where the library and the server meet.
"""

from __future__ import annotations

import argparse
import os


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
    p.add_argument("--model", metavar="PATH", help="checkpoint directory (default: embedded "
                   "all-MiniLM-L6-v2)")  # fmt: skip
    p.add_argument("--host", default="127.0.0.1",
                   help="interface to bind (default 127.0.0.1: this machine only)")  # fmt: skip
    p.add_argument("--port", type=int, default=50051, help="port; 0 picks a free one")
    p.add_argument("--max-texts", type=int, default=1024, help="most texts per request")
    p.add_argument("--max-tokens", type=int, default=131072, help="most tokens per request")
    p.add_argument("--queue-size", type=int, default=64,
                   help="most requests admitted at once; more get RESOURCE_EXHAUSTED")  # fmt: skip
    p.add_argument("--batch-window-ms", type=float, default=5.0,
                   help="how long a request waits for others to share its batch")  # fmt: skip
    p.add_argument("--max-batch", type=int, default=64,
                   help="most examples merged into one engine call")  # fmt: skip
    p.add_argument("--no-micro-batching", action="store_true",
                   help="run every request in its own engine call")  # fmt: skip
    p.add_argument("--tls-cert", metavar="PEM", help="certificate chain (serve TLS only)")
    p.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
    p.add_argument("--token-file", metavar="FILE",
                   help="require 'authorization: Bearer <token>' with the token in FILE "
                   "(or set $JAXATTN_TOKEN; never pass a token on the command line)")  # fmt: skip
    p.add_argument("--max-request-mib", type=float, default=4.0,
                   help="largest request message; larger get RESOURCE_EXHAUSTED")  # fmt: skip
    p.add_argument("--request-buffer-mib", type=float, default=64.0,
                   help="most unsent result MiB per call: beyond it the engine waits "
                   "for that client to read (flow control)")  # fmt: skip
    p.add_argument("--max-buffered-mib", type=float, default=1024.0,
                   help="most result MiB all calls may hold together (reserved at "
                   "admission; RESOURCE_EXHAUSTED beyond)")  # fmt: skip
    p.add_argument("--slow-reader-s", type=float, default=30.0,
                   help="cancel a call whose client reads nothing for this long")  # fmt: skip
    p.add_argument("--grace", type=float, default=30.0,
                   help="seconds in-flight calls get to finish on SIGTERM")  # fmt: skip
    p.add_argument("--log-level", default="INFO", help="logging level (one line per request)")


def read_token(token_file: str | None) -> str | None:
    """The bearer token from a file, else $JAXATTN_TOKEN, else None."""
    if token_file:
        with open(token_file, encoding="utf-8") as f:
            token = f.read().strip()
        if not token:
            raise ValueError(f"token file {token_file} is empty")
        return token
    return os.environ.get("JAXATTN_TOKEN") or None


def _run(args) -> int:
    from service.main import serve  # the server package, only when serving

    return serve(args)
