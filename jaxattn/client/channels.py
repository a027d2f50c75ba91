"""Channels to one or more servers: TLS, token, round-robin, retry with backoff."""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
from collections.abc import Callable, Sequence

import grpc

from jaxattn.client.errors import AttentionServiceError
from jaxattn.wire import codecs

# Retried: the server was unreachable or shutting down; Capture is a pure read,
# so a retry cannot duplicate an effect.
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE})


def _read(value: bytes | str | os.PathLike | None) -> bytes | None:
    """PEM bytes given inline or as a file path."""
    if value is None or isinstance(value, bytes):
        return value
    with open(value, "rb") as f:
        return f.read()


class Channels:
    """One channel per address, used in turn (client-side round-robin).

    Args:
      addresses: "host:port" strings.
      tls: use TLS (implied by root_certificates).
      root_certificates: PEM CA bundle (bytes or a path); None = system roots.
      server_name: override the name checked against the certificate.
      token: bearer token sent as `authorization: Bearer <token>`.
      retries: extra attempts after UNAVAILABLE (each on the next address).
      backoff: (first, cap) delay in seconds; delays double up to cap, jittered.
    """

    def __init__(
        self,
        addresses: Sequence[str],
        *,
        tls: bool = False,
        root_certificates: bytes | str | os.PathLike | None = None,
        server_name: str | None = None,
        token: str | None = None,
        retries: int = 3,
        backoff: tuple[float, float] = (0.1, 2.0),
    ):
        if not addresses:
            raise ValueError("address is empty: give at least one 'host:port'")
        options = [("grpc.max_receive_message_length", codecs.MAX_MAX_CHUNK_BYTES + (1 << 20))]
        if server_name:
            options.append(("grpc.ssl_target_name_override", server_name))
        roots = _read(root_certificates)
        self.addresses = tuple(addresses)
        if tls or roots is not None:
            creds = grpc.ssl_channel_credentials(root_certificates=roots)
            self._channels = [grpc.secure_channel(a, creds, options) for a in self.addresses]
        else:
            self._channels = [grpc.insecure_channel(a, options) for a in self.addresses]
        self.metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.retries = retries
        self.backoff = backoff
        self._turn = itertools.count()
        self._lock = threading.Lock()

    def next(self) -> tuple[int, grpc.Channel]:
        """The next (address index, channel) in round-robin order."""
        with self._lock:
            i = next(self._turn) % len(self._channels)
        return i, self._channels[i]

    def call(self, attempt: Callable[[grpc.Channel], object]) -> object:
        """Run `attempt(channel)`, retrying UNAVAILABLE on the next address with backoff.

        Raises:
          AttentionServiceError: any other failure, or UNAVAILABLE after all retries.
        """
        delay, cap = self.backoff
        for k in range(self.retries + 1):
            i, channel = self.next()
            try:
                return attempt(channel)
            except grpc.RpcError as e:
                if e.code() not in RETRYABLE or k == self.retries:
                    raise AttentionServiceError.from_rpc_error(e, self.addresses[i]) from None
            time.sleep(min(cap, delay * 2**k) * random.uniform(0.5, 1.0))
        raise AssertionError("unreachable")

    def close(self) -> None:
        for channel in self._channels:
            channel.close()
