"""Channels to one or more servers: TLS, token, round-robin, health, retry with backoff.

One channel per address; an address is HOST:PORT or a gRPC target URI
(`dns:///name:port`, `ipv4:ip:port,ip:port`, ...), checked before any channel is
made (`jaxattn.netaddr.check_targets`). Every channel balances over what its
target resolves to with gRPC's own resolver and `round_robin` policy, and
watches each backend's grpc.health.v1 status of the attention service
(`SERVICE_CONFIG`): a replica answering NOT_SERVING (a draining server) gets no
calls of that channel, and a channel none of whose backends is healthy or
reachable (TRANSIENT_FAILURE) is passed over while another is not (`next`).
Docs: docs/replicas.md.

Retry policy (the same for every call): UNAVAILABLE is retried (the server was
unreachable, restarting or shutting down), and so is a CANCELLED this client did
not cause (gRPC's server stop answers CANCELLED to calls it accepted but never
handed to a handler, grpc/grpc#41785), in both cases only when nothing was
received: every call of this service is a pure read, so a retry cannot
duplicate an effect;
each retry goes to the next address after a jittered, doubling delay capped at
`backoff[1]`; and all attempts together stay within the call's one deadline, so
no call outlives its timeout however many retries are allowed.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable, Sequence

import grpc

from jaxattn.client.errors import AttentionServiceError
from jaxattn.errors import UsageError
from jaxattn.netaddr import check_targets, token_problem
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import codecs

# A dead peer that sent no FIN (a lost host, a cut network) is noticed within
# about keepalive time + timeout while a call is open, instead of at its deadline.
# The server accepts pings this often (service/server.py).
KEEPALIVE = [("grpc.keepalive_time_ms", 60_000), ("grpc.keepalive_timeout_ms", 20_000)]

# The service whose health the client watches (service/server.py sets it SERVING, and
# NOT_SERVING while draining; a server without the health service counts as healthy).
HEALTH_SERVICE = pb.DESCRIPTOR.services_by_name["AttentionService"].full_name
# gRPC's client-side load balancing and health checking, for every channel; the
# resolver's own service config (DNS TXT records) is not consulted, so it is this one.
SERVICE_CONFIG = json.dumps(
    {
        "loadBalancingConfig": [{"round_robin": {}}],
        "healthCheckConfig": {"serviceName": HEALTH_SERVICE},
    }
)
BALANCING = [("grpc.service_config", SERVICE_CONFIG), ("grpc.service_config_disable_resolution", 1)]
# A channel in these states has no backend to send to now: passed over while another has.
_UNUSABLE = ("transient failure", "shutdown")


def _connectivity(channel: grpc.Channel, try_to_connect: bool = False) -> str | None:
    """The channel's connectivity now ("idle", "connecting", "ready", "transient
    failure", "shutdown"), asked of gRPC's core without a thread (grpc-python's
    `subscribe` polls in one per channel and races `close`); None where that is
    not available (another grpc.Channel), which counts as usable."""
    core = getattr(channel, "_channel", None)
    try:
        state = core.check_connectivity_state(try_to_connect)
    except Exception:  # no core channel, or a closed one
        return None
    return {0: "idle", 1: "connecting", 2: "ready", 3: "transient failure", 4: "shutdown"}.get(
        state
    )


def backoff_delay(attempt: int, backoff: tuple[float, float], remaining: float) -> float:
    """Seconds to wait before retry `attempt` + 1: first * 2**attempt, capped, in
    [1/2, 1] of that (jitter spreads clients that failed together), never past
    the deadline (`remaining` seconds away)."""
    first, cap = backoff
    return max(0.0, min(cap, first * 2**attempt, remaining) * random.uniform(0.5, 1.0))


def _read(value: bytes | str | os.PathLike | None) -> bytes | None:
    """PEM bytes given inline or as a file path.

    Raises:
      UsageError: what was given holds no PEM certificate (gRPC would report it
        later as a server that cannot be reached).
    """
    if value is None:
        return None
    data = value
    if not isinstance(value, bytes):
        with open(value, "rb") as f:
            data = f.read()
    if b"-----BEGIN CERTIFICATE-----" not in data:
        where = "the root_certificates given" if isinstance(value, bytes) else os.fspath(value)
        raise UsageError(
            f"{where} is not a PEM CA certificate (no '-----BEGIN CERTIFICATE-----'"
            " block): give the CA bundle the server's certificate was signed "
            "with"
        )
    return data


def first_turn(n: int) -> int:
    """The address a new client's first call goes to, of `n`: a random one (`Channels`)."""
    return random.randrange(n)


class Channels:
    """One channel per address, used in turn (client-side round-robin), unusable ones
    passed over.

    Args:
      addresses: "host:port" strings or gRPC target URIs (`jaxattn.netaddr.check_targets`).
      tls: use TLS (implied by root_certificates).
      root_certificates: PEM CA bundle (bytes or a path); None = system roots.
      server_name: override the name checked against the certificate.
      token: bearer token sent as `authorization: Bearer <token>`.
      retries: extra attempts after a retryable failure (each on the next address).
      backoff: (first, cap) delay in seconds; delays double up to cap, jittered.
      own_connection: connections of this client's own, not shared with the other
        channels of the process to the same address (gRPC's default shares them).
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
        own_connection: bool = False,
    ):
        addresses = check_targets(addresses)
        if token and (why := token_problem(token)):  # before any channel is made
            raise UsageError(f"token cannot be sent: {why}")
        if retries < 0:
            raise UsageError(f"retries must be >= 0, got {retries}")
        if not 0 < backoff[0] <= backoff[1]:
            raise UsageError(f"backoff must be (first, cap) with 0 < first <= cap, got {backoff}")
        options = [
            ("grpc.max_receive_message_length", codecs.MAX_MAX_CHUNK_BYTES + (1 << 20)),
            *KEEPALIVE,
            *BALANCING,
        ]
        if server_name:
            options.append(("grpc.ssl_target_name_override", server_name))
        if own_connection:  # else gRPC shares one connection among a process's channels
            options.append(("grpc.use_local_subchannel_pool", 1))
        roots = _read(root_certificates)
        self.addresses = addresses
        if tls or roots is not None:
            creds = grpc.ssl_channel_credentials(root_certificates=roots)
            self._channels = [grpc.secure_channel(a, creds, options) for a in self.addresses]
        else:
            self._channels = [grpc.insecure_channel(a, options) for a in self.addresses]
        self.metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.retries = retries
        self.backoff = backoff
        # A random first turn, as gRPC's round_robin starts at a random backend: were it
        # address 0, every client of a fleet started together would send its first
        # calls to the same replica (32 clients' warm-ups all on one: a convoy that the
        # servers' micro-batching then keeps together for a while).
        self._turn = first_turn(len(self._channels))
        self._lock = threading.Lock()
        self.closed = False
        for channel in self._channels:
            _connectivity(channel, try_to_connect=True)  # connect (and watch health) now

    def retryable(self, error: grpc.RpcError) -> bool:
        """Whether a failed attempt that delivered nothing may be retried: UNAVAILABLE,
        or CANCELLED from the server side (this client cancels only by closing)."""
        code = error.code()
        return code == grpc.StatusCode.UNAVAILABLE or (
            code == grpc.StatusCode.CANCELLED and not self.closed
        )

    def next(self, failed: frozenset[int] | set[int] = frozenset()) -> tuple[int, grpc.Channel]:
        """The next (address index, channel) in round-robin order, passing over a channel
        gRPC reports unusable (TRANSIENT_FAILURE: unreachable, or every backend NOT_SERVING)
        and the addresses in `failed` (those this call already failed on), while
        another is left; when none is, the plain next in turn."""
        n = len(self._channels)
        with self._lock:
            start = self._turn
            order = [(start + k) % n for k in range(n)]
            i = min(order, key=lambda j: (j in failed, self.unusable(j)))
            self._turn = start + order.index(i) + 1
        return i, self._channels[i]

    def unusable(self, i: int) -> bool:
        """Whether gRPC reports channel `i` with no backend to send to now."""
        return _connectivity(self._channels[i]) in _UNUSABLE

    def channel(self, i: int) -> grpc.Channel:
        """The channel of address `i`."""
        return self._channels[i]

    def call(self, attempt: Callable[[grpc.Channel, float], object], timeout: float) -> object:
        """Run `attempt(channel, seconds_left)`, retrying `retryable` failures on the next
        address with backoff, all within `timeout` seconds.

        Raises:
          AttentionServiceError: any other failure, the last one after all retries,
            or DEADLINE_EXCEEDED when the time ran out between attempts.
        """
        deadline = time.monotonic() + timeout
        failed: set[int] = set()
        for k in range(self.retries + 1):
            i, channel = self.next(failed)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AttentionServiceError(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"no answer within {timeout}s",
                    self.addresses[i],
                )
            try:
                return attempt(channel, remaining)
            except grpc.RpcError as e:
                if not self.retryable(e) or k == self.retries:
                    raise AttentionServiceError.from_rpc_error(e, self.addresses[i]) from None
                failed.add(i)
            time.sleep(backoff_delay(k, self.backoff, deadline - time.monotonic()))
        raise AssertionError("unreachable")

    def wait_ready(self, timeout: float) -> None:
        """Block until every address accepts connections (UNAVAILABLE after `timeout`)."""
        for address, channel in zip(self.addresses, self._channels, strict=True):
            try:
                grpc.channel_ready_future(channel).result(timeout=timeout)
            except grpc.FutureTimeoutError:
                raise AttentionServiceError(
                    grpc.StatusCode.UNAVAILABLE, f"not ready within {timeout}s", address
                ) from None

    def close(self) -> None:
        self.closed = True
        for channel in self._channels:
            channel.close()
