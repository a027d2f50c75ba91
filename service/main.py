"""`serve`: the server's thin main, the one entry point the jaxattn CLI calls.

    from service import ServerOptions, serve
    serve(None, "127.0.0.1:50051", ServerOptions(token="..."))   # until SIGTERM/SIGINT

`jaxattn serve` parses the command line, reads token and certificate files
into `ServerOptions` and calls `serve`; nothing here sees argparse.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Sequence

from jaxattn.netaddr import check_listen_address
from jaxattn.progress import counted
from service.allocator import DEFAULT_ARENAS, cap_arenas
from service.generation import generator_problem
from service.limits import example_limit
from service.options import ServerOptions
from service.server import check_tls, create_server

log = logging.getLogger("jaxattn.service")


def serve(
    model: str | None,
    address: str,
    options: ServerOptions,
    *,
    log_level: str = "INFO",
    precision: str = "highest",
    attention: str = "auto",
    attention_block: int | None = None,
    warmup: Sequence[tuple[str, ...]] = (),
    warmup_sizes: str = "all",
    malloc_arenas: int | None = None,
) -> int:
    """Load the model, serve until SIGTERM/SIGINT, drain in-flight calls, return 0.

    Args:
      model: what `jaxattn.load` takes: a checkpoint directory or a Hugging Face Hub
        name (NAME[@REVISION]); None = the embedded model.
      address: "host:port" to bind; port 0 picks a free one (printed).
      options: admission, batching, security and drain settings.
      log_level: the logging level name (one line per request at INFO).
      precision: the compute precision of requests that do not choose one.
      attention: how the engine runs attention ("auto", "dense", "blockwise":
        `jaxattn.Engine`'s attention=).
      attention_block: the blockwise path's block size (`jaxattn.Engine`'s
        attention_block=; None: its default).
      warmup: kinds of request to compile before listening (`Engine.warmup`), each
        a tuple of quantities asked for together (all layers and heads, float32,
        this precision), then, on a server that generates (options.max_new_tokens),
        the programs of a generation's steps (`Engine.warmup_generation`). A
        SIGTERM/SIGINT while they compile ends the warmup and the server returns 0
        without listening.
      warmup_sizes: "all" or "largest" batch sizes per bucket (`Engine.warmup`).
      malloc_arenas: cap this process's glibc malloc arenas (`service.allocator`;
        None: its DEFAULT_ARENAS, 0: glibc's default), before the model loads and
        the threads start.

    Raises:
      UsageError: a warmup quantity this model does not compute, or an unknown
        `warmup_sizes`, before anything listens; a bad `malloc_arenas`; a
        $JAXATTN_CODEC_THREADS that is not a number of threads.
      TypeError: `warmup` not a sequence of tuples of names.
    """
    import jaxattn

    _check_warmup(warmup)
    codec_threads = _codec_threads()
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # jax's own INFO lines (e.g. "Unable to initialize backend 'tpu'") are not the server's.
    logging.getLogger("jax").setLevel(max(logging.WARNING, logging.getLogger().level))
    # Capped before the model loads and the threads start; said once the request
    # kinds are checked, so that a refused command line prints its one error alone.
    arenas = cap_arenas(DEFAULT_ARENAS if malloc_arenas is None else malloc_arenas)
    stop, reload = threading.Event(), threading.Event()
    # Install handlers before the slow load, so an early SIGTERM still drains.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    # SIGHUP re-reads the token file; without one it is logged and ignored (its default
    # action would end the server at once, cutting its calls)
    signal.signal(signal.SIGHUP, lambda *_: reload.set())
    check_listen_address(address)  # before the slow load: a busy port, a bad host
    check_tls(options)  # and a certificate and key gRPC cannot serve
    if options.metrics_port:
        _check_metrics_port(address, options.metrics_port)
    engine = jaxattn.load(
        model, precision=precision, attention=attention, attention_block=attention_block
    )
    specs = [_warmup_spec(engine, what) for what in warmup]  # every name checked first
    log.info(arenas)
    log.info("codec pool: %s", codec_threads)
    # The server runs an example over its per-example limit in layer groups within it
    # (`create_server`): warmup compiles those groups' programs too.
    group_bytes = example_limit(options.max_example_bytes, options.max_buffered_bytes)[0] or None

    def capture_warmup(spec):  # -> a call compiling its shapes, returning how many
        def run() -> int:
            before = engine.compiled_shapes
            kw = dict(sizes=warmup_sizes, stop=stop.is_set, group_bytes=group_bytes)
            return engine.warmup(spec, **kw) - before

        return run

    steps = [
        (",".join(what), capture_warmup(spec)) for what, spec in zip(warmup, specs, strict=True)
    ]
    if warmup and options.max_new_tokens and generator_problem(engine) is None:
        # a generation's steps run their own programs (`Engine.warmup_generation`)
        steps.append(
            ("generation steps", lambda: engine.warmup_generation(warmup_sizes, stop.is_set))
        )
    for what, compile_shapes in steps:
        if stop.is_set():
            break
        log.info("warming up %s (%s sizes)", what, warmup_sizes)
        t = time.perf_counter()
        shapes = compile_shapes()
        if stop.is_set():
            log.info("stopped while warming up %s: not listening", what)
            return 0
        log.info(
            "warmed up %s: %d shapes (%s sizes) in %.1f s",
            what,
            shapes,
            warmup_sizes,
            time.perf_counter() - t,
        )
    if stop.is_set():
        log.info("stopped before listening")
        return 0
    server, port = create_server(engine, address, options=options)
    server.start()
    info = engine.info
    host = address.rsplit(":", 1)[0]
    scheme = "TLS" if options.tls_cert else "plaintext"
    name = f"{info.name}@{info.revision}" if info.revision else info.name  # the Hub commit
    print(
        f"jaxattn serve: {name} ({info.layers} layers x {info.heads} heads, "
        f"{info.precision}) listening on {host}:{port} ({scheme})",
        flush=True,
    )
    if server.metrics_port is not None:
        print(f"jaxattn serve: metrics on http://{host}:{server.metrics_port}/metrics", flush=True)
    while not stop.wait(0.5):  # wake up regularly: signal handlers run between waits
        if reload.is_set():
            reload.clear()
            if options.clients is None:
                log.warning("SIGHUP ignored: no token file (--tokens) to reload")
            else:
                reload_clients(options.clients)
    log.info("draining: no new calls, in-flight calls get %.0fs", options.grace_s)
    server.stop(options.grace_s).wait()
    log.info("stopped")
    return 0


def reload_clients(clients) -> bool:
    """Re-read the token file (on SIGHUP); a bad file is logged and changes nothing."""
    try:
        clients.reload()
    except (OSError, ValueError) as e:  # InputError is a ValueError
        log.error("token file not reloaded, the clients in force stay: %s", e)
        return False
    names = clients.names
    log.info("token file reloaded: %s (%s)", counted(len(names), "client"), ", ".join(names))
    return True


def _check_metrics_port(address: str, port: int) -> None:
    """UsageError, before the slow load, unless /metrics could listen on `port` of
    the server's host (and it is not the gRPC port itself)."""
    from jaxattn.errors import UsageError

    host = address.rsplit(":", 1)[0]
    if address.endswith(f":{port}"):
        raise UsageError(
            f"--metrics-port {port} is the gRPC --port too: give the metrics another, or 0"
        )
    check_listen_address(f"{host}:{port}", port_flag="--metrics-port")


def _codec_threads() -> str:
    """The codec pool's threads, as its log line says them; a UsageError where
    $JAXATTN_CODEC_THREADS is not a number of threads (before the slow load, not in
    the first compressed call)."""
    from jaxattn.wire import codec_pool

    threads = codec_pool.workers()  # UsageError where the variable is bad
    where = os.environ.get(codec_pool.THREADS_ENV, "").strip()
    return f"{threads} threads" + (f" (${codec_pool.THREADS_ENV})" if where else "")


def _check_warmup(warmup) -> None:
    """TypeError unless `warmup` is a sequence of tuples of quantity names."""
    if isinstance(warmup, str) or not all(
        isinstance(what, (tuple, list)) and all(isinstance(n, str) for n in what) for what in warmup
    ):
        raise TypeError(
            f"warmup must be a sequence of tuples of quantity names, one per kind "
            f"of request, e.g. [('attention',), ('attention', 'queries')]; "
            f"got {warmup!r}"
        )


def _warmup_spec(engine, what: tuple[str, ...]):
    """The spec of a request for `what` (all layers and heads, float32); a quantity this
    model does not compute is a UsageError that names the warmup."""
    from jaxattn.errors import UsageError

    try:
        return engine.make_spec(what=what)
    except UsageError as e:
        raise UsageError(f"--warmup {','.join(what)}: {e}") from None
