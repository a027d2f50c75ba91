"""Server options: frozen data, validated once."""

from __future__ import annotations

import dataclasses
import math
import threading
from typing import TYPE_CHECKING

from jaxattn.errors import UsageError
from jaxattn.netaddr import token_problem
from jaxattn.wire.codecs import MAX_INT32, MAX_UINT32, MAX_UINT64
from service.generation import DEFAULT_MAX_NEW_TOKENS

if TYPE_CHECKING:
    from service.clients import ClientTable

# The server is gRPC's synchronous one: a Capture call holds a handler thread for its
# whole life (queued, computing, streaming), so `queue_size` admitted calls are as
# many threads, plus SPARE_WORKERS for quick calls (GetModelInfo, reflection; health
# Watch holds none). The pool's size is set up front; gRPC refuses calls past it.
# 1024 admitted calls is 16 full default batches (max_batch_examples 64) queued behind
# the one engine a server runs: more only wait, adding no throughput, and each thread
# costs a stack (8 MiB of address space by default). `--queue-size 100000` was taken:
# a pool of up to 100008 threads, started as calls came, with gRPC's own limit on
# concurrent calls as high, so a burst of clients could make the process start threads
# until the OS or its memory gave out. For more concurrent clients, run more replicas.
MAX_QUEUE_SIZE = 1024
SPARE_WORKERS = 8
MAX_WORKERS = MAX_QUEUE_SIZE + SPARE_WORKERS
QUEUE_SIZE_BOUND = "each admitted call holds a handler thread; for more clients run more replicas"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServerOptions:
    """How a server admits, batches and protects requests.

    Attributes:
      max_texts: most examples one request may hold (RESOURCE_EXHAUSTED above).
      max_tokens: most tokens, all examples together, per request
        (RESOURCE_EXHAUSTED above). With max_texts it bounds one request's memory.
      queue_size: most Capture calls admitted at once, queued or streaming; one
        more gets RESOURCE_EXHAUSTED. Bounds the server's memory and its threads
        (each admitted call holds one): at most MAX_QUEUE_SIZE (1024).
      batch_window_s: how long the batcher waits after a request arrives for
        others with the same spec to join its batch.
      max_batch_examples: most examples one merged engine call takes (a single
        larger request still runs, alone).
      micro_batching: False runs each request in its own engine call (for
        benchmarks and debugging).
      token: when set, every call but health checks must send
        `authorization: Bearer <token>` (UNAUTHENTICATED otherwise).
      clients: instead of one token, the clients of a token file, each with its
        own token and quotas (`service.clients.ClientTable`; docs/server.md,
        "Clients and quotas").
      tls_cert: PEM certificate chain; with tls_key the port serves TLS only.
      tls_key: PEM private key of tls_cert.
      grace_s: on stop (SIGTERM), how long in-flight calls may take to finish.
      max_request_bytes: largest incoming message (gRPC's receive limit); larger
        requests get RESOURCE_EXHAUSTED from gRPC before any parsing.
      max_metadata_bytes: largest request metadata (headers: the token, ...).
      request_buffer_bytes: most result bytes one call may hold unsent (one
        example if larger): the engine runs a call's next examples only when
        its client has read enough of the previous ones (flow control).
      max_buffered_bytes: most result bytes all admitted calls may hold
        together, reserved at admission (RESOURCE_EXHAUSTED beyond).
      max_example_bytes: most output bytes one example may return, padded to
        its length bucket (what the engine holds on the device for it; set it
        to what the device can hold besides the model). A larger example of
        several layers runs in layer groups within it, each sent as it lands
        (`jaxattn.engine.layer_groups`); a request with an example one of whose
        layers is larger is refused before any compute (RESOURCE_EXHAUSTED,
        "max_example_bytes", or "max_buffered_bytes" when that is smaller: a
        group is buffered whole), with the numbers (`service.limits`).
      max_result_bytes: most output bytes one request may return, all its
        examples together (RESOURCE_EXHAUSTED, "max_result_bytes", beyond).
      slow_reader_s: a call whose client reads nothing for this long while its
        results wait is cancelled (and logged RESOURCE_EXHAUSTED).
      max_workers: handler threads, 1..MAX_WORKERS (1032); None = queue_size +
        SPARE_WORKERS (8) (a streaming call holds a thread for its whole duration).
      max_new_tokens: most tokens one request may ask a decoder to generate before
        its capture (CaptureRequest.generate; RESOURCE_EXHAUSTED, "max_new_tokens",
        beyond; ModelInfo.max_new_tokens); 0: this server does not generate. A
        generation of N tokens is a prefill and N one-token steps of its texts, run a
        step per turn.
      join_generations: whether a generating call joins a shared generation under
        way (`service.generation.SharedGeneration.join`: continuous batching) rather
        than starting a run of its own; None (the default): on an accelerator, not on
        the CPU, where a step's cost grows with its rows and joining bought nothing
        (staggered clients on a 2-core CPU: 0.92-0.99x the time without joining on a
        quiet machine, 0.68x under load; BENCHMARKS.md).
      metrics_port: serve Prometheus metrics over plain HTTP at /metrics on this
        port of the server's host (0: a free one, `AttentionServer.metrics_port`);
        None (the default): no metrics endpoint (`service.metrics`).
    """

    max_texts: int = 1024
    max_tokens: int = 131072
    queue_size: int = 64
    batch_window_s: float = 0.005
    max_batch_examples: int = 64
    micro_batching: bool = True
    token: str | None = None
    clients: ClientTable | None = None
    tls_cert: bytes | None = None
    tls_key: bytes | None = None
    grace_s: float = 30.0
    max_request_bytes: int = 4 << 20
    max_metadata_bytes: int = 16 << 10
    request_buffer_bytes: int = 64 << 20
    max_buffered_bytes: int = 1 << 30
    max_example_bytes: int = 4 << 30
    max_result_bytes: int = 64 << 30
    slow_reader_s: float = 30.0
    max_workers: int | None = None
    metrics_port: int | None = None
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    join_generations: bool | None = None

    def __post_init__(self):
        for name in (
            "max_texts",
            "max_tokens",
            "queue_size",
            "max_batch_examples",
            "max_request_bytes",
            "max_metadata_bytes",
            "request_buffer_bytes",
            "max_buffered_bytes",
            "max_example_bytes",
            "max_result_bytes",
        ):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.queue_size > MAX_QUEUE_SIZE:
            raise UsageError(
                f"queue_size must be at most {MAX_QUEUE_SIZE} ({QUEUE_SIZE_BOUND}), "
                f"got {self.queue_size}"
            )
        if self.max_workers is not None and not 1 <= self.max_workers <= MAX_WORKERS:
            raise UsageError(
                f"max_workers must be None or 1..{MAX_WORKERS} (handler threads: "
                f"{MAX_QUEUE_SIZE} calls and {SPARE_WORKERS} spare), got {self.max_workers}"
            )
        if self.max_new_tokens < 0:
            raise UsageError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        for name in ("max_texts", "max_tokens", "max_new_tokens"):  # ModelInfo's uint32s
            if getattr(self, name) > MAX_UINT32:
                raise UsageError(
                    f"{name} must be at most {MAX_UINT32} (ModelInfo carries it as a uint32), "
                    f"got {getattr(self, name)}"
                )
        for name in ("max_request_bytes", "max_metadata_bytes"):  # gRPC's int options
            if getattr(self, name) > MAX_INT32:
                raise UsageError(
                    f"{name} must be at most {MAX_INT32} (2 GiB: gRPC takes it as a 32-bit "
                    f"int), got {getattr(self, name)}"
                )
        for name in ("max_buffered_bytes", "max_example_bytes", "max_result_bytes"):
            if getattr(self, name) > MAX_UINT64:  # ModelInfo's (and the wire's) uint64s
                raise UsageError(
                    f"{name} must be at most {MAX_UINT64} (a uint64), got {getattr(self, name)}"
                )
        # Waited for with threading's timeouts: inf, nan or beyond TIMEOUT_MAX would
        # stop the batcher's worker with an OverflowError at its first wait.
        for name, least in (("slow_reader_s", None), ("batch_window_s", 0), ("grace_s", 0)):
            value = getattr(self, name)
            low = value > 0 if least is None else value >= least
            if not (low and math.isfinite(value) and value <= threading.TIMEOUT_MAX):
                bound = "> 0" if least is None else f">= {least}"
                raise UsageError(
                    f"{name} must be a number of seconds {bound} and at most "
                    f"{threading.TIMEOUT_MAX:.0f}, got {value}"
                )
        if (self.tls_cert is None) != (self.tls_key is None):
            raise UsageError("tls_cert and tls_key go together: give both or neither")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise UsageError(f"metrics_port must be 0..65535 or None, got {self.metrics_port}")
        if self.token is not None and (why := token_problem(self.token)):
            raise UsageError(f"token cannot be received: {why}")
        if self.token is not None and self.clients is not None:
            raise UsageError("give a token or a token file's clients, not both")

    @property
    def workers(self) -> int:
        """Handler threads: one per admitted stream plus a few for quick calls."""
        return self.max_workers or self.queue_size + SPARE_WORKERS
