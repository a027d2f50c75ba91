"""How many malloc arenas the server's process may have (glibc only).

glibc gives each thread that allocates an arena of its own (a free one if
there is one, else a new one) up to 8 per core on 64-bit hosts, and an arena keeps the memory its
thread freed for reuse by that arena alone. A server's ~100 threads (gRPC's
pollers and workers, XLA's pools) each freeing MiB-sized answers thus hold, between
them, far more than any one answer: on the 2-core machine two arenas took a
small model's replicas' resting size from 1.8 GB to 1.4-1.55 GB, and with a
384 MiB result budget their peak under 256 clients from 3.4 GB to 2.1-2.2 GB
(RELIABILITY.md, "The replicas' memory, bounded by their budget"). Two is the common setting
for many-threaded servers (MALLOC_ARENA_MAX=2); allocation-heavy threads
contend a little more for the arenas, which a server whose threads mostly wait
on the GIL, the network or the device hardly feels.

`cap_arenas` asks glibc through `mallopt(M_ARENA_MAX, n)`. It must run before
the process starts many threads: glibc fixes the cap when the ninth arena is
asked for, and arenas made before the call stay. An operator's own
`$MALLOC_ARENA_MAX` wins (glibc read it at start-up; nothing is changed).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

from jaxattn.errors import UsageError

DEFAULT_ARENAS = 2  # `jaxattn serve --malloc-arenas`'s default
ENV = "MALLOC_ARENA_MAX"
_M_ARENA_MAX = -8  # glibc's malloc.h


def cap_arenas(n: int) -> str:
    """Cap this process's malloc arenas at `n` (0: leave glibc's default); says what
    applies, for the server's log.

    Raises:
      UsageError: `n` < 0.
    """
    if n < 0:
        raise UsageError(f"malloc arenas must be 0 (glibc's default) or more, got {n}")
    if os.environ.get(ENV):
        return f"malloc arenas: at most {os.environ[ENV]} (${ENV})"
    if n == 0:
        return "malloc arenas: glibc's default (8 per core)"
    libc = _glibc()
    if libc is None:
        return "malloc arenas: not glibc, left as they are"
    if not libc.mallopt(_M_ARENA_MAX, n):
        return f"malloc arenas: glibc refused a cap of {n}, left as they are"
    return f"malloc arenas: at most {n}"


def _glibc():
    """The C library, if it is glibc (has mallopt and gnu_get_libc_version); else None."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version  # noqa: B018 - only glibc has it (musl has no M_ARENA_MAX)
        libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        return libc
    except (OSError, AttributeError, TypeError):
        return None
