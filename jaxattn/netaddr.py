"""Why an address cannot be listened on, said before a server loads its model.

`check_listen(host, port)` binds a plain socket to the address and lets it go:
a host that names no address of this machine, or a port that another process
holds, is a `UsageError` naming --host/--port and the reason, seconds before
the model would have loaded, instead of the server library's failure after it.
Port 0 (any free port) always passes. A leaf: the standard library and errors.
"""

from __future__ import annotations

import errno
import socket

from jaxattn.errors import UsageError


def check_listen(host: str, port: int) -> None:
    """UsageError unless a server could listen on `host`:`port` now."""
    where = f"{host}:{port}"
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)  # fmt: skip
    except (socket.gaierror, UnicodeError) as e:
        raise UsageError(f"cannot listen on {where}: --host {host!r} does not resolve "
                         f"({getattr(e, 'strerror', None) or e})") from None  # fmt: skip
    family, kind, proto, _, sockaddr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do
        try:
            s.bind(sockaddr)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                why = f"--port {port} is in use (another server?): choose another, or 0 for any"
            elif e.errno == errno.EADDRNOTAVAIL:
                why = f"--host {host!r} is not an address of this machine"
            elif e.errno == errno.EACCES:
                why = f"--port {port} needs privileges (ports below 1024): choose a higher one"
            else:
                why = e.strerror or str(e)
            raise UsageError(f"cannot listen on {where}: {why}") from None
