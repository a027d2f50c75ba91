"""The server's thin main: `jaxattn serve ...` or `python -m service ...`."""

from __future__ import annotations

import logging
import signal
import sys
import threading

from service.options import ServerOptions
from service.server import create_server

log = logging.getLogger("jaxattn.service")
_MiB = 1 << 20


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


def serve(args) -> int:
    """Load the model, serve until SIGTERM/SIGINT, drain, return 0."""
    import jaxattn
    from jaxattn.cli.serve_cmd import read_token

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ValueError("--tls-cert and --tls-key go together")
    options = ServerOptions(
        max_texts=args.max_texts,
        max_tokens=args.max_tokens,
        queue_size=args.queue_size,
        batch_window_s=args.batch_window_ms / 1e3,
        max_batch_examples=args.max_batch,
        micro_batching=not args.no_micro_batching,
        token=read_token(args.token_file),
        tls_cert=_read(args.tls_cert),
        tls_key=_read(args.tls_key),
        grace_s=args.grace,
        max_request_bytes=int(args.max_request_mib * _MiB),
        request_buffer_bytes=int(args.request_buffer_mib * _MiB),
        max_buffered_bytes=int(args.max_buffered_mib * _MiB),
        slow_reader_s=args.slow_reader_s,
    )
    stop = threading.Event()
    # Install handlers before the slow load, so an early SIGTERM still drains.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    engine = jaxattn.load(args.model)
    server, port = create_server(engine, f"{args.host}:{args.port}", options=options)
    server.start()
    info = engine.info
    scheme = "TLS" if options.tls_cert else "plaintext"
    print(f"jaxattn serve: {info.name} ({info.layers} layers x {info.heads} heads) "
          f"listening on {args.host}:{port} ({scheme})", flush=True)  # fmt: skip
    while not stop.wait(0.5):  # wake up regularly: signal handlers run between waits
        pass
    log.info("draining: no new calls, in-flight calls get %.0fs", options.grace_s)
    server.stop(options.grace_s).wait()
    log.info("stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    from jaxattn.cli import main as cli_main

    return cli_main(["serve", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
