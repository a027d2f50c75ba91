"""Per-client quotas: token buckets, concurrent calls, and the refusal they give.

A client of the token file (`service.clients`) has a `ClientQuota`: one token
bucket per rate limit (requests/s, input tokens/s, result MiB/s), a count of
its Capture calls in progress, and its result MiB per request. The Capture
handler asks it twice (`service/servicer.py`):

  * `enter()` when the call starts, before the request is parsed: requests_per_s
    and concurrent_calls (`leave()` when the call ends);
  * `charge(tokens, result_bytes)` once the request is tokenised and sized:
    result_mib (one request's output), tokens_per_s, result_mib_per_s.

Past a limit it raises `QuotaExceeded`: RESOURCE_EXHAUSTED with the trailers
`jaxattn-limit` (the token file's field: "requests_per_s", ...) and, where
waiting helps, `retry-after-ms`; nothing is taken from any bucket then.

A bucket holds `rate x burst_s` (at least one request's worth: a request
larger than the bucket is let through when the bucket is full and leaves it
in debt, so the long-run rate still holds). Time comes from an injected
clock, so tests never sleep.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

import grpc

from jaxattn.errors import UsageError
from service.requests import RequestError

_MiB = 1 << 20
RETRY_AFTER_KEY = "retry-after-ms"
# The longest wait a refusal names: a rate so small (tokens_per_s = 1e-300) that the
# wait is longer, or past any float, names a year, a number the trailer can carry.
MAX_RETRY_AFTER_S = 365 * 86400.0


class TokenBucket:
    """Tokens refill at `rate` per second up to `capacity`; a cost is taken whole.

    A cost larger than `capacity` is allowed once the bucket is full, leaving
    it below zero (in debt) until the refill pays it back.

    Args:
      rate: tokens per second (> 0).
      capacity: most tokens held (> 0); the bucket starts full.
      clock: seconds, monotonic (time.monotonic; a fake one in tests).
    """

    def __init__(self, rate: float, capacity: float, clock: Callable[[], float] = time.monotonic):
        if not rate > 0 or not capacity > 0:
            raise UsageError(f"rate and capacity must be > 0, got {rate} and {capacity}")
        self.rate = rate
        self.capacity = capacity
        self.clock = clock
        self.level = capacity
        self._stamp = clock()

    def _refill(self) -> None:
        now = self.clock()
        self.level = min(self.capacity, self.level + max(0.0, now - self._stamp) * self.rate)
        self._stamp = now

    def wait(self, cost: float) -> float:
        """Seconds until `cost` can be taken (0.0: now). Takes nothing."""
        self._refill()
        short = min(cost, self.capacity) - self.level
        return 0.0 if short <= 1e-9 * self.capacity else short / self.rate  # float slack

    def take(self, cost: float) -> None:
        """Take `cost` (call after `wait(cost)` said 0.0)."""
        self._refill()
        self.level -= cost

    def give_back(self, cost: float) -> None:
        """Return a `cost` taken for work that was then not done (up to `capacity`)."""
        self._refill()
        self.level = min(self.capacity, self.level + cost)


class QuotaExceeded(RequestError):
    """A client past one of its quotas: RESOURCE_EXHAUSTED.

    Attributes:
      client: the client's name (never its token).
      limit: the token file field that was hit ("requests_per_s", "tokens_per_s",
        "concurrent_calls", "result_mib", "result_mib_per_s"): `jaxattn-limit`.
      retry_after_s: how long until the same request would pass (`retry-after-ms`),
        or None where waiting alone does not help (result_mib) or cannot be told
        (concurrent_calls: when one of the client's calls ends); at most
        MAX_RETRY_AFTER_S.
    """

    def __init__(self, client: str, limit: str, message: str, retry_after_s: float | None = None):
        if retry_after_s is not None:
            if not retry_after_s <= MAX_RETRY_AFTER_S:  # inf too: no integer of ms
                retry_after_s = MAX_RETRY_AFTER_S
            message = f"{message}; retry after {retry_after_s:.3g} s"
        super().__init__(grpc.StatusCode.RESOURCE_EXHAUSTED, message, limit=limit)
        self.client = client
        self.retry_after_s = retry_after_s

    def trailers(self) -> tuple[tuple[str, str], ...]:
        out = super().trailers()
        if self.retry_after_s is not None:
            out += ((RETRY_AFTER_KEY, str(math.ceil(self.retry_after_s * 1e3))),)
        return out


class ClientQuota:
    """One client's quota state. Thread-safe.

    Args:
      name: the client's name (what logs and refusals show).
      limits: a `service.clients.Limits` (None of its fields: no such limit);
        None: no limits at all.
      clock: the buckets' clock.
    """

    def __init__(self, name: str, limits=None, clock: Callable[[], float] = time.monotonic):
        self.name = name
        self.clock = clock
        self.active = 0  # Capture calls in progress
        self.refused: dict[str, int] = {}  # refusals by limit, since start
        self._lock = threading.Lock()
        self.set_limits(limits)

    def set_limits(self, limits) -> None:
        """New limits (a reloaded token file), with new, full buckets. The calls in
        progress stay counted here: each `leave`s this object when it ends."""
        buckets: dict[str, tuple[TokenBucket, str]] = {}
        for field, unit in (
            ("requests_per_s", "requests"),
            ("tokens_per_s", "tokens"),
            ("result_mib_per_s", "MiB"),
        ):
            rate = getattr(limits, field) if limits is not None else None
            if rate is not None:
                buckets[field] = (TokenBucket(rate, rate * limits.burst_s, self.clock), unit)
        with self._lock:
            self.limits, self._buckets = limits, buckets

    def enter(self) -> None:
        """A Capture call starts: count it against requests_per_s and concurrent_calls.

        Raises:
          QuotaExceeded: either is used up (nothing counted then).
        """
        with self._lock:
            cap = self.limits.concurrent_calls if self.limits else None
            if cap is not None and self.active >= cap:
                raise self._refuse(
                    "concurrent_calls",
                    f"client {self.name} has {self.active} calls in progress, as many as "
                    "its quota allows (concurrent_calls): wait for one to finish",
                )
            self._take({"requests_per_s": 1.0})
            self.active += 1

    def leave(self) -> None:
        """A call that `enter` admitted has ended."""
        with self._lock:
            self.active -= 1

    def charge(self, tokens: int, result_bytes: int) -> None:
        """Count a parsed request's input tokens and output bytes.

        Raises:
          QuotaExceeded: its output is over result_mib, or tokens_per_s or
            result_mib_per_s is used up (nothing taken then).
        """
        with self._lock:
            per_request = self.limits.result_mib if self.limits else None
            if per_request is not None and result_bytes > per_request * _MiB:
                raise self._refuse(
                    "result_mib",
                    f"this request returns {result_bytes / _MiB:.1f} MiB; client "
                    f"{self.name} may receive at most {per_request:g} MiB per request "
                    "(result_mib): send fewer or shorter texts, or fewer quantities",
                )
            self._take(_costs(tokens, result_bytes))

    def refund(self, tokens: int, result_bytes: int) -> None:
        """Give back what `charge(tokens, result_bytes)` took, for a request the server
        then refused (its queue or result buffers full): nothing was computed for it."""
        with self._lock:
            for field, cost in _costs(tokens, result_bytes).items():
                if field in self._buckets:
                    self._buckets[field][0].give_back(cost)

    def _take(self, costs: dict[str, float]) -> None:
        """Take every cost from its bucket, or none and raise for the longest wait."""
        waits = {
            field: (self._buckets[field][0].wait(cost), cost)
            for field, cost in costs.items()
            if field in self._buckets
        }
        field = max(waits, key=lambda f: waits[f][0], default=None)
        if field is not None and waits[field][0] > 0:
            bucket, unit = self._buckets[field]
            raise self._refuse(
                field,
                f"client {self.name} is over its {field} quota ({bucket.rate:g} {unit}/s; "
                f"this request needs {waits[field][1]:g})",
                waits[field][0],
            )
        for field, (_, cost) in waits.items():
            self._buckets[field][0].take(cost)

    def _refuse(self, limit: str, message: str, retry_after_s=None) -> QuotaExceeded:
        self.refused[limit] = self.refused.get(limit, 0) + 1
        return QuotaExceeded(self.name, limit, message, retry_after_s)


# The caller of a server without a token file (no token, or one --token-file token).
ANONYMOUS = ClientQuota("anonymous")


def caller(context) -> ClientQuota:
    """The quota of the client making this call: what the interceptor (`service.auth`)
    attached to the call's context, or ANONYMOUS (no limits)."""
    return getattr(context, "quota", None) or ANONYMOUS


def _costs(tokens: int, result_bytes: int) -> dict[str, float]:
    """A request's cost in each per-second bucket (`charge` takes it, `refund` gives it back)."""
    return {"tokens_per_s": tokens, "result_mib_per_s": result_bytes / _MiB}
