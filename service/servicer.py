"""The AttentionService implementation: validate, queue, stream, log."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Iterator

import grpc

from jaxattn.quantities import QUANTITIES, STATISTICS
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import Compressor, codecs, serialize_coalesced, serialize_example
from service.admitted_call import DeviceMemoryExhausted
from service.micro_batching import EngineFailed, JobCancelled, MicroBatcher, QueueFull, SlowReader
from service.prefetch import prefetch
from service.quotas import caller
from service.requests import RequestError, RequestParser

log = logging.getLogger("jaxattn.service")

# A request of one example this short answers in a few small messages.
_SMALL_TOKENS = 64


class AttentionServicer:
    """Serves one engine through a `MicroBatcher`. Register it with `handlers`.

    Logs one line per Capture call: peer, status, texts, tokens, bytes out and
    duration. Never the texts themselves, never the metadata (it holds the token).
    At most `max_calls` Capture calls hold a handler thread at once (None: no
    bound); one more is refused at once (RESOURCE_EXHAUSTED, "queue_size"), so
    however slow the requests being checked are, the other threads stay free for
    health checks and GetModelInfo (gRPC counts every call against one limit).
    """

    def __init__(
        self,
        engine,
        batcher: MicroBatcher,
        parser: RequestParser,
        max_calls: int | None = None,
        metrics=None,
    ):
        self.engine = engine
        self.batcher = batcher
        self.parser = parser
        self.max_calls = max_calls
        self.metrics = metrics  # service.metrics.ServerMetrics, or None
        self._calls = threading.BoundedSemaphore(max_calls) if max_calls else None
        self._weights = getattr(engine.info, "weights", "")  # a fake engine may not say

    def GetModelInfo(self, request, context):  # noqa: N802 (gRPC method name)
        if isinstance(request, Undecodable):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        i = self.engine.info
        return pb.ModelInfo(
            name=i.name,
            family=i.family,
            layers=i.layers,
            heads=i.heads,
            hidden_size=i.hidden,
            head_dim=i.head_dim,
            vocab_size=i.vocab,
            max_positions=i.max_positions,
            dtype=i.dtype,
            precision=i.precision,
            quantities=list(i.quantities or QUANTITIES),
            shared_weights=i.shared_weights,
            max_texts=self.parser.max_texts,
            max_tokens=self.parser.max_tokens,
            max_request_bytes=self.parser.max_request_bytes,
            max_metadata_bytes=self.parser.max_metadata_bytes,
            weights=getattr(i, "weights", ""),
            revision=getattr(i, "revision", ""),
            causal=getattr(i, "causal", False),
            num_key_value_heads=getattr(i, "num_key_value_heads", 0) or i.heads,
            attention_windows=list(getattr(i, "attention_windows", ())),
            min_chunk_bytes=codecs.MIN_MAX_CHUNK_BYTES,
            max_chunk_bytes=codecs.MAX_MAX_CHUNK_BYTES,
            default_chunk_bytes=codecs.DEFAULT_MAX_CHUNK_BYTES,
            max_example_bytes=self.parser.limits.example_bytes,
            max_result_bytes=self.parser.limits.result_bytes,
            coalesce=True,
            max_new_tokens=self.parser.max_new_tokens,
            # the ids a continuation ends at (Engine.eos_ids); none where it does not generate
            eos_ids=list(self.engine.eos_ids) if self.parser.max_new_tokens else [],
            **self._longest,
        )

    @functools.cached_property
    def _longest(self) -> dict[str, int]:
        """ModelInfo's longest_text_* fields: the longest text a request of each kind
        may send under this server's limits (computed once: the limits are fixed)."""
        info, out = self.engine.info, {}
        available = list(info.quantities or QUANTITIES)
        kinds = (
            ("longest_text_statistics", [q for q in available if q in STATISTICS]),
            ("longest_text_attention", ["attention"] if "attention" in available else []),
        )
        for field, what in kinds:
            if what:
                spec = self.engine.make_spec(what=what)
                out[field] = self.parser.limits.longest(
                    spec, info.max_positions, self.parser.max_tokens
                )
        return out

    def Capture(self, request, context):  # noqa: N802 (gRPC method name)
        start = time.monotonic()
        stats = dict(texts=len(getattr(request, "texts", ())), tokens=0, bytes=0, code="OK")
        job = messages = None
        holds = entered = False
        quota = caller(context)  # the client's quotas (service.quotas)
        try:
            holds = self._calls is None or self._calls.acquire(blocking=False)
            if not holds:
                raise QueueFull(
                    f"the server is handling {self.max_calls} calls, as many as its "
                    "threads allow: retry later",
                    "queue_size",
                )
            quota.enter()  # requests_per_s, concurrent_calls
            entered = True
            if isinstance(request, Undecodable):
                raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, request.message)
            parsed = self.parser.parse(request)
            stats["tokens"] = parsed.tokens
            charged = (
                parsed.work_tokens,
                self.parser.limits.total_size(parsed.spec, parsed.tokenized),
            )
            quota.charge(*charged)
            remaining = context.time_remaining()
            deadline = None if remaining is None else time.monotonic() + remaining
            try:
                job = self.batcher.submit(
                    parsed.spec,
                    parsed.tokenized,
                    deadline,
                    chunk_bytes=parsed.max_chunk_bytes,
                    client=quota.name,
                    coalesce=parsed.coalesce,
                    generation=parsed.generation,
                )
            except (QueueFull, JobCancelled):  # not admitted (or draining): nothing runs
                quota.refund(*charged)  # so its tokens and MiB are not paid for
                raise
            # Fires on completion, cancellation and deadline: the job stops
            # waiting and the batcher drops its unfinished work. A call that
            # ended while its request was checked takes no callback: cancel now.
            if not context.add_callback(job.cancel):
                job.cancel()
            # A client that reads nothing for too long is cut off: its send may
            # be blocked by HTTP/2 flow control, which only a cancel unblocks.
            job.on_stall = context.cancel
            # The fingerprint in the first header (where the client reads it there) or
            # in the initial metadata (attention.proto, CaptureRequest.weights_in_header).
            in_header = parsed.weights_in_header
            messages = _serialized(job, parsed, self._weights if in_header else "")
            # Encode ahead of the send, in a thread; one short sentence is not worth one.
            if len(parsed.tokenized) > 1 or parsed.tokens > _SMALL_TOKENS:
                messages = prefetch(messages)
            if self.metrics is not None:
                messages = self.metrics.sending(messages, parsed.spec.dtype, parsed.codec)
            if self._weights and not in_header:  # an explicit send: a gRPC operation of its own
                try:
                    context.send_initial_metadata(((codecs.WEIGHTS_METADATA, self._weights),))
                except grpc.RpcError:  # gRPC's answer on a call that has ended already
                    if context.is_active():
                        raise  # it has not: a bug, INTERNAL below
                    stats["code"] = _gone(context, job)  # the client went (or its deadline)
                    return
            for message in messages:
                stats["bytes"] += len(message)
                yield message
        except RequestError as e:
            stats["code"] = e.code.name
            context.set_trailing_metadata(e.trailers())
            context.abort(e.code, e.message)
        except QueueFull as e:
            stats["code"] = "RESOURCE_EXHAUSTED"
            context.set_trailing_metadata((("jaxattn-limit", e.limit),))
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))
        except SlowReader as e:
            stats["code"] = "RESOURCE_EXHAUSTED"
            context.set_trailing_metadata((("jaxattn-limit", "slow_reader"),))
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))
        except JobCancelled:
            if not context.is_active():  # the client cancelled or its deadline passed
                stats["code"] = _gone(context)
            elif job is not None and job.past_deadline():  # seen before gRPC saw it
                stats["code"] = "DEADLINE_EXCEEDED"
                context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "the call's deadline passed")
            else:  # the batcher was closed under a live call: the server is stopping
                stats["code"] = "UNAVAILABLE"
                context.abort(grpc.StatusCode.UNAVAILABLE, "the server is shutting down")
        except DeviceMemoryExhausted as e:  # too large for the device even alone, or
            stats["code"] = "RESOURCE_EXHAUSTED"  # its results filled XLA's pinned pool
            context.set_trailing_metadata((("jaxattn-limit", e.limit),))
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))
        except EngineFailed as e:
            stats["code"] = "INTERNAL"
            context.abort(grpc.StatusCode.INTERNAL, f"the engine failed on this batch: {e}")
        except GeneratorExit:  # the client went away mid-stream (or was cut off as too slow)
            stats["code"] = _gone(context, job)
            raise
        except Exception as e:  # a bug here: say so, keep serving
            log.error("Capture failed: %s", type(e).__name__, exc_info=e)
            stats["code"] = "INTERNAL"
            context.abort(grpc.StatusCode.INTERNAL, f"the server failed: {type(e).__name__}")
        finally:
            if holds and self._calls is not None:
                self._calls.release()
            if entered:
                quota.leave()
            if messages is not None:
                messages.close()  # stops the prefetch thread at once
            if job is not None:
                self.batcher.release(job)
            log.info(
                "Capture peer=%s client=%s status=%s texts=%d tokens=%d bytes_out=%d "
                "duration_ms=%.1f",
                context.peer(),
                quota.name,
                stats["code"],
                stats["texts"],
                stats["tokens"],
                stats["bytes"],
                (time.monotonic() - start) * 1e3,
            )


def _serialized(job, parsed, weights: str = "") -> Iterator[bytes]:
    """The job's examples in input order as serialised messages, one copy per chunk
    (see jaxattn.wire.protowire), one item per message or, where the request asks,
    several (`serialize_coalesced`, packing across examples only those the job has
    ready); the handler's response serializer passes them through. `weights` goes
    in the first example's header (ExampleHeader.weights)."""
    codec, max_chunk_bytes = parsed.codec, parsed.max_chunk_bytes
    compressor = None
    if parsed.coalesce:
        messages = serialize_coalesced(
            job.results(),
            codec=codec,
            max_chunk_bytes=max_chunk_bytes,
            ready=job.next_ready,
            weights=weights,
            peek=job.peek,
        )
    else:  # the stream's pieces compressed a few ahead, across its examples
        compressor = Compressor(codec, max_chunk_bytes, job.peek) if codec != "none" else None
        messages = (
            message
            for k, (index, cap) in enumerate(job.results())
            for message in serialize_example(
                index,
                cap,
                codec=codec,
                max_chunk_bytes=max_chunk_bytes,
                weights="" if k else weights,
                compressor=compressor,
            )
        )
    try:
        for message in messages:
            job.touch()  # the consumer took the previous message: the client is reading
            yield message
    finally:
        if compressor is not None:
            compressor.close()
    # (Closing this closes `messages`, which closes job.results(): its bytes are released.)


class Undecodable:
    """A request whose bytes are not a valid message (e.g. a string that is not UTF-8)."""

    def __init__(self, message: str):
        self.message = message


def _tolerant(message_type):
    """A request deserializer that hands a malformed request to the handler as
    `Undecodable`: gRPC answers a deserializer's exception with INTERNAL, but a
    malformed request is the caller's error (INVALID_ARGUMENT)."""
    name = message_type.DESCRIPTOR.full_name

    def parse(data: bytes):
        try:
            return message_type.FromString(data)
        except Exception as e:  # google.protobuf.message.DecodeError
            return Undecodable(
                f"the request is not a valid {name} (string fields must be UTF-8): {e}"
            )

    return parse


def _passthrough(message: bytes) -> bytes:
    return message


def handlers(servicer: AttentionServicer) -> grpc.GenericRpcHandler:
    """The service's method handlers: Capture yields pre-serialised CaptureResponse bytes."""
    return grpc.method_handlers_generic_handler(
        "jaxattn.v1.AttentionService",
        {
            "Capture": grpc.unary_stream_rpc_method_handler(
                servicer.Capture,
                request_deserializer=_tolerant(pb.CaptureRequest),
                response_serializer=_passthrough,
            ),
            "GetModelInfo": grpc.unary_unary_rpc_method_handler(
                servicer.GetModelInfo,
                request_deserializer=_tolerant(pb.GetModelInfoRequest),
                response_serializer=pb.ModelInfo.SerializeToString,
            ),
        },
    )


def _gone(context, job=None) -> str:
    if job is not None and isinstance(job.error, SlowReader):
        return "RESOURCE_EXHAUSTED"
    remaining = context.time_remaining()
    return "DEADLINE_EXCEEDED" if remaining is not None and remaining <= 0 else "CANCELLED"
