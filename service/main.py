"""`serve`: the server's thin main, the one entry point the jaxattn CLI calls.

    from service import ServerOptions, serve
    serve(None, "127.0.0.1:50051", ServerOptions(token="..."))   # until SIGTERM/SIGINT

`jaxattn serve` parses the command line, reads token and certificate files
into `ServerOptions` and calls `serve`; nothing here sees argparse.
"""

from __future__ import annotations

import logging
import signal
import threading
import time

from service.options import ServerOptions
from service.server import create_server

log = logging.getLogger("jaxattn.service")


def serve(
    model: str | None,
    address: str,
    options: ServerOptions,
    *,
    log_level: str = "INFO",
    precision: str = "highest",
    warmup: tuple[str, ...] | None = None,
    warmup_sizes: str = "all",
) -> int:
    """Load the model, serve until SIGTERM/SIGINT, drain in-flight calls, return 0.

    Args:
      model: a checkpoint directory for `jaxattn.load`; None = the embedded model.
      address: "host:port" to bind; port 0 picks a free one (printed).
      options: admission, batching, security and drain settings.
      log_level: the logging level name (one line per request at INFO).
      precision: the compute precision of requests that do not choose one.
      warmup: quantities whose requests (all layers and heads, float32, this
        precision) are compiled before listening (`Engine.warmup`); None: none.
      warmup_sizes: "all" or "largest" batch sizes per bucket (`Engine.warmup`).

    Raises:
      ValueError: an unknown quantity or `warmup_sizes`, before anything listens.
    """
    import jaxattn

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # jax's own INFO lines (e.g. "Unable to initialize backend 'tpu'") are not the server's.
    logging.getLogger("jax").setLevel(max(logging.WARNING, logging.getLogger().level))
    stop = threading.Event()
    # Install handlers before the slow load, so an early SIGTERM still drains.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    engine = jaxattn.load(model, precision=precision)
    if warmup:
        t = time.perf_counter()
        shapes = engine.warmup(engine.make_spec(what=warmup), sizes=warmup_sizes)
        log.info("warmed up %s: %d shapes (%s sizes) in %.1f s", ",".join(warmup), shapes,
                 warmup_sizes, time.perf_counter() - t)  # fmt: skip
    server, port = create_server(engine, address, options=options)
    server.start()
    info = engine.info
    host = address.rsplit(":", 1)[0]
    scheme = "TLS" if options.tls_cert else "plaintext"
    print(f"jaxattn serve: {info.name} ({info.layers} layers x {info.heads} heads, "
          f"{info.precision}) listening on {host}:{port} ({scheme})", flush=True)  # fmt: skip
    while not stop.wait(0.5):  # wake up regularly: signal handlers run between waits
        pass
    log.info("draining: no new calls, in-flight calls get %.0fs", options.grace_s)
    server.stop(options.grace_s).wait()
    log.info("stopped")
    return 0
