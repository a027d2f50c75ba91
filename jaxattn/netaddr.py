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


def check_listen_address(address: str, port_flag: str = "--port") -> None:
    """`check_listen` of a "HOST:PORT" address (IPv6 hosts in brackets)."""
    host, _, port = address.rpartition(":")
    check_listen(host.strip("[]"), int(port), port_flag=port_flag)


def check_listen(
    host: str, port: int, family: int = socket.AF_UNSPEC, *, port_flag: str = "--port"
) -> None:
    """UsageError unless a server could listen on `host`:`port` now: on one of the
    addresses `host` resolves to (of `family`: AF_INET for a server of IPv4 only).
    `port_flag`: the flag that chose the port, as the message names it."""
    where = f"{host}:{port}"
    try:
        infos = socket.getaddrinfo(
            host or None, port, family, socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (socket.gaierror, UnicodeError) as e:
        raise UsageError(
            f"cannot listen on {where}: --host {host!r} does not resolve"
            f"{'' if family == socket.AF_UNSPEC else ' to an IPv4 address'} "
            f"({getattr(e, 'strerror', None) or e})"
        ) from None
    errors = []
    for af, kind, proto, _, sockaddr in infos:
        try:
            with socket.socket(af, kind, proto) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do
                s.bind(sockaddr)
            return  # the server binds what it can, as this one could
        except OSError as e:
            errors.append(e)
    codes = [e.errno for e in errors]
    if errno.EADDRINUSE in codes:
        why = f"{port_flag} {port} is in use (another server?): choose another, or 0 for any"
    elif errno.EACCES in codes:
        why = f"{port_flag} {port} needs privileges (ports below 1024): choose a higher one"
    elif errno.EADDRNOTAVAIL in codes:
        why = f"--host {host!r} is not an address of this machine"
    else:
        why = errors[0].strerror or str(errors[0])
    raise UsageError(f"cannot listen on {where}: {why}")
