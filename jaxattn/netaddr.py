"""Addresses, checked before anything is sent or loaded: can a server listen here, can a
client dial there.

`check_listen(host, port)` binds a plain socket to the address and lets it go:
a host that names no address of this machine, or a port that another process
holds, is a `UsageError` naming --host/--port and the reason, seconds before
the model would have loaded, instead of the server library's failure after it.
Port 0 (any free port) always passes.

`check_targets(addresses)` reads a client's server addresses (HOST:PORT or a
gRPC target URI, docs/replicas.md) without resolving them: an entry that is
not one is a `UsageError` naming it, before any call, instead of gRPC's
UNAVAILABLE at the first call's deadline. A leaf: the standard library and errors.
"""

from __future__ import annotations

import errno
import ipaddress
import re
import socket
from collections.abc import Sequence

from jaxattn.errors import UsageError


def listen_address(host: str, port: int) -> str:
    """ "HOST:PORT" of a --host and --port, an IPv6 host in brackets ("::1" -> "[::1]:PORT"),
    as gRPC and `check_listen_address` read it."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


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


def token_problem(token: str) -> str | None:
    """Why a bearer token cannot travel in gRPC's `authorization` header (None: it can).

    A header value is printable ASCII (gRPC refuses any other byte: a client's call
    failed INTERNAL "Invalid metadata", and a server expecting such a token admitted
    no one). The token itself is never quoted, only where the character is."""
    if not token:
        return "it is empty"
    if token != token.strip():
        return "it has spaces or a newline around it (strip them)"
    for i, ch in enumerate(token):
        if not " " <= ch <= "~":
            kind = "a control character" if ch < " " or ch == "\x7f" else "not ASCII"
            return (
                f"its character {i + 1} of {len(token)} is {kind}: a token is "
                "printable ASCII (gRPC sends it in a header)"
            )
    return None


# A DNS name (RFC 1123 labels; "_" too, as in service names) or an IPv4 literal.
_HOST = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9_-]{1,63}(?<!-))*\.?")
# gRPC's resolvers (schemes) a target may name; anything else before "://" or ":" is refused.
TARGET_SCHEMES = ("dns", "ipv4", "ipv6", "unix", "unix-abstract")
TARGET_FORMS = (
    "HOST:PORT, [IPV6]:PORT, dns:///HOST:PORT, ipv4:IP:PORT[,IP:PORT...], "
    "ipv6:[IP]:PORT[,...], unix:PATH"
)


def check_targets(addresses: Sequence[str]) -> tuple[str, ...]:
    """The addresses a client dials, each checked (`target_problem`), as a tuple.

    Raises:
      UsageError: the list is empty, or names the first bad entry and what is wrong.
    """
    if isinstance(addresses, str):
        addresses = [addresses]
    addresses = tuple(addresses)
    if not addresses:
        raise UsageError(f"no server address: give at least one ({TARGET_FORMS})")
    for i, address in enumerate(addresses):
        why = target_problem(address)
        if why:
            where = f" (entry {i + 1} of {len(addresses)})" if len(addresses) > 1 else ""
            raise UsageError(f"server address {address!r}{where} {why}: valid are {TARGET_FORMS}")
    return addresses


def target_problem(address) -> str | None:
    """What is wrong with one client address, in words (None: nothing). Nothing is resolved."""
    if not isinstance(address, str):
        return f"is a {type(address).__name__}, not a string"
    if not address or address != address.strip() or any(c.isspace() for c in address):
        return "is empty or holds whitespace"
    scheme, sep, rest = address.partition(":")
    if sep and scheme in TARGET_SCHEMES:
        if scheme == "dns":  # dns:///HOST:PORT or dns://AUTHORITY/HOST:PORT
            if not rest.startswith("//") or "/" not in rest[2:]:
                return "is not dns:///HOST:PORT (three slashes, or dns://DNS-SERVER/HOST:PORT)"
            return _host_port_problem(rest[2:].partition("/")[2])
        if scheme in ("ipv4", "ipv6"):
            for entry in rest.split(","):
                why = _host_port_problem(entry, ip=scheme)
                if why:
                    return f"has entry {entry!r} that {why}" if entry != rest else why
            return None
        return None if rest.strip("/") else f"names no socket after {scheme}:"
    if "://" in address:
        return f"has a scheme gRPC does not resolve ({scheme}:)"
    return _host_port_problem(address)


def _host_port_problem(entry: str, ip: str | None = None) -> str | None:
    host, sep, port = entry.rpartition(":")
    if not sep or not host:
        return f"is not HOST:PORT ({entry!r} has no port)"
    if not port.isdigit() or not 0 < int(port) < 65536:
        return f"has port {port!r}, not a number in 1..65535"
    if host.startswith("[") and host.endswith("]"):
        host, version = host[1:-1], 6
    else:
        version = 4
    if ip is not None or version == 6:
        want = 6 if ip == "ipv6" else version
        try:
            got = ipaddress.ip_address(host).version
        except ValueError:  # no IP address at all
            got = None
        return None if got == want else f"has host {host!r}, not an IPv{want} address"
    if ":" in host:
        return f"has host {host!r}: an IPv6 address goes in brackets, [{host}]:{port}"
    if not _HOST.fullmatch(host):
        return f"has host {host!r}, not a host name or address"
    return None
