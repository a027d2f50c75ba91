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
