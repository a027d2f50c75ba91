"""`AttentionClient`: capture attention from a jaxattn server, as `Capture` objects."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterable, Iterator, Sequence

import grpc

from jaxattn.capture import Capture
from jaxattn.client import request as requests
from jaxattn.client.channels import Channels, backoff_delay
from jaxattn.client.errors import AttentionServiceError
from jaxattn.client.resume import Resume
from jaxattn.client.served_model import capture_provenance, model_info_of
from jaxattn.info import ModelInfo
from jaxattn.inputs import Text
from jaxattn.selection import Selection, positions_of
from jaxattn.stream import CaptureStream, Progress, too_long_policy
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import StreamDecoder, WireError, codec_pool, codecs
from jaxattn.wire.receive import stream_weights

# Method paths, not the generated stubs: those pin grpcio to the grpcio-tools
# version that generated them, and the client needs nothing else from them.
CAPTURE_METHOD = "/jaxattn.v1.AttentionService/Capture"
INFO_METHOD = "/jaxattn.v1.AttentionService/GetModelInfo"


class AttentionClient:
    """A client of the jaxattn attention service; a `jaxattn.CaptureSource`.

    Imports no jax, flax or torch.

        with AttentionClient("127.0.0.1:50051") as client:
            caps = client.capture(["I went to the store."], what=("attention",),
                                  dtype="uint8", codec="zstd")

    Args:
      address: "host:port", or several: calls go to them in turn (round-robin),
        passing over one that is unreachable or NOT_SERVING; a call that finds
        one UNAVAILABLE (or stopping) is retried on the next, and a capture
        stream cut mid-way resumes on the next from the first example not
        received, when that replica serves the same weights. An address may be
        a gRPC target (`dns:///name:port`: every replica the name resolves to,
        balanced by gRPC). A bad entry is a UsageError naming it. See
        docs/replicas.md.
      token: bearer token, when the server wants one.
      tls: connect with TLS (implied by root_certificates).
      root_certificates: PEM CA bundle (bytes or a file path) to trust.
      server_name: the name to check the server's certificate against, if not
        the address's host.
      timeout: default deadline in seconds for each call, retries included.
        Every call has one: the client never waits forever.
      retries: extra attempts after UNAVAILABLE, or a CANCELLED the client did
        not cause, in a row without a new example received (a stream resumed
        after some examples starts the count again); all within `timeout`.
        0: no retry and no resume.
      backoff: (first, cap) retry delay in seconds, doubling, jittered.
      codec: the default wire compression of `capture`/`stream` (none, zstd, lz4).
      own_connection: open this client's own connections. By default gRPC shares one
        connection per address among all the channels of a process, so several
        clients in one process are one connection (a reset cuts all their calls);
        a load generator standing in for separate clients wants its own.
      coalesce: ask the server to pack several stream items (headers, chunks)
        into one message (CaptureRequest.coalesce): fewer, larger messages, which
        gRPC moves at less cost. The client reads both forms, so a server that
        predates the field (and sends one item per message) answers the same.

    Attributes:
      wire_bytes: chunk payload bytes received so far by this client (after
        compression: what the codecs saved shows here).
      weights_in_header: ask for the answering model's weights fingerprint in the
        stream's first header (CaptureRequest.weights_in_header; True), not in the
        call's initial metadata, which costs the server a send of its own per call.
        The client reads either, so a server that predates the field answers the
        same. False asks as a client that predates it (for measurements).
    """

    def __init__(
        self,
        address: str | Sequence[str] = "127.0.0.1:50051",
        *,
        token: str | None = None,
        tls: bool = False,
        root_certificates: bytes | str | os.PathLike | None = None,
        server_name: str | None = None,
        timeout: float = 120.0,
        retries: int = 3,
        backoff: tuple[float, float] = (0.1, 2.0),
        codec: str = "none",
        own_connection: bool = False,
        coalesce: bool = True,
    ):
        requests.check_timeout(timeout)
        requests.check_codec(codec)
        codec_pool.workers()  # a bad $JAXATTN_CODEC_THREADS named now, not as the server's
        addresses = [address] if isinstance(address, str) else list(address)
        self._channels = Channels(
            addresses,
            tls=tls,
            root_certificates=root_certificates,
            server_name=server_name,
            token=token,
            retries=retries,
            backoff=backoff,
            own_connection=own_connection,
        )
        self.timeout = timeout
        self.codec = codec
        self.coalesce = bool(coalesce)
        self.weights_in_header = True
        self.wire_bytes = 0
        self._info: ModelInfo | None = None  # model_info(), fetched once
        self._replicas: dict[int, ModelInfo | None] = {}  # each address's, fetched once

    # -- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> AttentionClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close every channel (in-flight calls are cancelled)."""
        self._channels.close()

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Block until every address accepts connections.

        Raises:
          AttentionServiceError: UNAVAILABLE if one is not ready within `timeout`.
        """
        self._channels.wait_ready(timeout)

    # -- calls ------------------------------------------------------------------------

    def model_info(self, timeout: float | None = None) -> ModelInfo:
        """The server's model (same fields as `Engine.info`), fetched once and kept.

        Raises:
          AttentionServiceError: the call failed.
        """
        if self._info is None:
            self._info = model_info_of(self.server_info(timeout))
        return self._info

    def server_info(self, timeout: float | None = None) -> pb.ModelInfo:
        """The raw GetModelInfo answer: the model plus quantities and request limits
        (max_texts, max_tokens, max_example_bytes, max_result_bytes, and the longest
        text a request of statistics alone or of the full attention may send:
        longest_text_statistics, longest_text_attention; see attention.proto)."""
        if timeout is not None:
            requests.check_timeout(timeout)
        t = self.timeout if timeout is None else timeout
        md = self._channels.metadata
        return self._channels.call(
            lambda ch, left: ch.unary_unary(
                INFO_METHOD,
                request_serializer=pb.GetModelInfoRequest.SerializeToString,
                response_deserializer=pb.ModelInfo.FromString,
            )(pb.GetModelInfoRequest(), timeout=left, metadata=md),
            t,
        )

    def capture(
        self,
        texts: Sequence[Text],
        *,
        what: str | Iterable[str] | None = ("attention",),
        layers: Selection = None,
        heads: Selection = None,
        dtype: str = "float32",
        codec: str | None = None,
        too_long: str | None = None,
        precision: str | None = None,
        max_chunk_bytes: int | None = None,
        timeout: float | None = None,
        query_positions: Selection = None,
        key_positions: Selection = None,
        generate: int | None = None,
        stop_at_eos: bool = True,
    ) -> list[Capture]:
        """Capture attention quantities for each text, like `Engine.capture`.

        Args:
          texts: strings, or (sentence_a, sentence_b) pairs.
          what: quantity names (see `jaxattn.QUANTITIES`).
          layers: layers (`jaxattn.selection.Selection`: indices, negative ones, slices,
            "0,3,-1"), None for all; resolved against `model_info()` if needed.
          heads: heads likewise.
          dtype: float32 (exact), float16, bfloat16 or uint8.
          codec: wire compression: none, zstd or lz4 (lossless); None = the client's.
          too_long: a text over the model's limit: "error" (default; the server
            refuses the call), "truncate" (cut; `Capture.truncated`) or "skip"
            (left out of the result). "skip" asks the server to truncate and
            drops the truncated captures: their compute and transfer are paid.
          precision: compute precision ("highest", "tf32", "bf16"); None: the
            server's default (`model_info().precision`).
          max_chunk_bytes: chunk size bound (default: under 4 MiB).
          timeout: deadline in seconds (default: the client's).
          query_positions: the query rows the maps keep, as `Engine.capture`
            (negative positions from each text's end; the server checks them
            against each text: INVALID_ARGUMENT, field "query_positions[i]").
          key_positions: the key positions the maps keep, likewise.
          generate: a decoder only, as `Engine.capture`: the server first continues
            each text by up to this many greedily generated tokens, then captures
            prompt + continuation (`Capture.generated_start`: the first generated
            token; `Capture.stop`: why it ended, None from a server that predates
            the field). too_long then applies to prompt + new tokens ("skip" drops a
            text whose prompt + generate exceed the model's positions: asked of
            the server with truncate, so their generation is paid). Refused by
            the server beyond `server_info().max_new_tokens` (0: it cannot generate).
          stop_at_eos: with `generate`: end a continuation at an EOS token (the
            server's `Engine.eos_ids`: `server_info().eos_ids`).

        Returns:
          One Capture per (unskipped) text, in input order, with its `text`,
          `truncated` and `provenance` (source "server HOST:PORT").

        Raises:
          UsageError: a malformed argument (caught before any call).
          AttentionServiceError: the server refused or failed the call (its
            status code, message and `field`), or the stream broke the
            protocol (DATA_LOSS).
        """
        return list(
            self.stream(
                texts,
                what=what,
                layers=layers,
                heads=heads,
                dtype=dtype,
                codec=codec,
                too_long=too_long,
                precision=precision,
                max_chunk_bytes=max_chunk_bytes,
                timeout=timeout,
                query_positions=query_positions,
                key_positions=key_positions,
                generate=generate,
                stop_at_eos=stop_at_eos,
            )
        )

    def stream(
        self,
        texts: Sequence[Text],
        *,
        what: str | Iterable[str] | None = ("attention",),
        layers: Selection = None,
        heads: Selection = None,
        dtype: str = "float32",
        codec: str | None = None,
        too_long: str | None = None,
        precision: str | None = None,
        max_chunk_bytes: int | None = None,
        timeout: float | None = None,
        query_positions: Selection = None,
        key_positions: Selection = None,
        generate: int | None = None,
        stop_at_eos: bool = True,
    ) -> Iterator[Capture]:
        """Like `capture`, but yield each example's Capture (in input order) as it arrives.

        Closing the iterator early cancels the call; the server drops the rest.
        """
        policy = too_long_policy(too_long)
        if timeout is not None:
            requests.check_timeout(timeout)
        request = requests.build(
            texts,
            what,
            requests.indices(layers, lambda: self.model_info().layers, "layers"),
            requests.indices(heads, lambda: self.model_info().heads, "heads"),
            dtype,
            self.codec if codec is None else codec,
            too_long=policy,
            precision=precision,
            max_chunk_bytes=max_chunk_bytes,
            query_positions=query_positions,
            key_positions=key_positions,
            generate=generate,
            stop_at_eos=stop_at_eos,
            max_positions=self._known_max_positions(),
        )
        request.coalesce = self.coalesce
        request.weights_in_header = self.weights_in_header
        texts = list(texts)
        if not texts:  # as the engine: no texts, no captures (the wire refuses an empty call)
            return iter(())
        return self._stream(request, texts, policy, self.timeout if timeout is None else timeout)

    def capture_iter(
        self,
        texts: Iterable[Text],
        *,
        what: str | Iterable[str] | None = ("attention",),
        layers: Selection = None,
        heads: Selection = None,
        dtype: str = "float32",
        too_long: str = "error",
        precision: str | None = None,
        progress: Progress | None = None,
        window: int | None = None,
        query_positions: Selection = None,
        key_positions: Selection = None,
        generate: int | None = None,
        stop_at_eos: bool = True,
    ) -> CaptureStream:
        """Captures of any number of texts, in input order, in bounded memory.

        `texts` (any iterable: a generator, a file's lines) is read `window`
        texts at a time (default 256), each window one Capture call, so memory
        holds one window's captures whatever the corpus length. The returned
        `jaxattn.CaptureStream` keeps the `skipped` and `truncated` input
        indices; `progress` is called per input (None when skipped).
        Arguments otherwise as `capture`; layers, heads and positions are resolved once.
        """
        layers = requests.indices(layers, lambda: self.model_info().layers, "layers") or None
        heads = requests.indices(heads, lambda: self.model_info().heads, "heads") or None
        # read once (a generator is not read again per window), bounded as `capture` does
        most = self._known_max_positions()
        query_positions = positions_of(query_positions, "query_positions", most)
        key_positions = positions_of(key_positions, "key_positions", most)
        return CaptureStream(
            self,
            texts,
            window=window or 256,
            too_long=too_long,
            progress=progress,
            what=what,
            layers=layers,
            heads=heads,
            dtype=dtype,
            precision=precision,
            query_positions=query_positions,
            key_positions=key_positions,
            generate=generate,
            stop_at_eos=stop_at_eos,
        )

    def _known_max_positions(self) -> int | None:
        """The model's longest input where this client already has its ModelInfo
        (`model_info()`, or a replica's, kept from an earlier call); None: no call made
        yet, and none is made for it (a selection is then bound by MAX_POSITIONS)."""
        known = (self._info, *self._replicas.values())
        return next((m.max_positions for m in known if m is not None), None)

    def _replica(self, i: int, deadline: float, fresh: bool = False) -> ModelInfo:
        """The model of address `i`: its own GetModelInfo, on its channel, kept for the
        provenance of later calls; `fresh` asks again (what a stream may be resumed
        against: the replica may have restarted with other weights since).

        Raises:
          grpc.RpcError: the call failed.
        """
        if fresh or i not in self._replicas:
            info_rpc = self._channels.channel(i).unary_unary(
                INFO_METHOD,
                request_serializer=pb.GetModelInfoRequest.SerializeToString,
                response_deserializer=pb.ModelInfo.FromString,
            )
            info = info_rpc(
                pb.GetModelInfoRequest(),
                timeout=max(0.001, deadline - time.monotonic()),
                metadata=self._channels.metadata,
            )
            self._replicas[i] = model_info_of(info)
        return self._replicas[i]

    def _first_replica(self, i: int, deadline: float, fresh: bool) -> ModelInfo | None:
        """`_replica`, or None when it fails: the capture that asks has worked."""
        try:
            return self._replica(i, deadline, fresh)
        except grpc.RpcError:
            return None

    def _answering(self, i: int, sent: str, deadline: float, fresh: bool) -> ModelInfo | None:
        """The model answering a call on address `i` that named weights `sent`.

        The call names the answering model's weights (`_named_weights`): the
        ModelInfo kept for address `i` serves while its weights are those;
        otherwise (a restarted replica, another one behind a balancer, a first
        call) GetModelInfo is asked again, and where it reached another replica
        than the one answering, the weights the call named win: `Resume`
        compares them. A server that does not say: `_first_replica`.
        """
        if not sent:
            return self._first_replica(i, deadline, fresh)
        known = self._replicas.get(i)
        if known is not None and known.weights == sent:
            return known
        return _as_named(self._first_replica(i, deadline, fresh=True), sent)

    def _stream(
        self, request: pb.CaptureRequest, texts: list, policy: str, timeout: float
    ) -> Iterator[Capture]:
        """The captures of `request`, each exactly once and in order, resumed on another
        replica from the first example not received when a stream is cut (`Resume`)."""
        deadline = time.monotonic() + timeout
        channels = self._channels
        resume = Resume(request)
        failed: set[int] = set()
        misses = 0  # failed attempts in a row that delivered no example
        while True:
            if resume.done == len(texts):
                # Cut after the last example but before the call's end (its OK status):
                # everything arrived, there is nothing to resume (asking for no texts
                # would be refused as INVALID_ARGUMENT; issue 33's faulty network).
                return
            i, channel = channels.next(failed)
            address = channels.addresses[i]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AttentionServiceError(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"no answer within {timeout}s{resume.so_far()}",
                    address,
                )
            decoder = StreamDecoder(texts[resume.done :])
            part = resume.request()
            before, call = resume.done, None
            try:
                info, asked = None, bool(resume.done)
                if asked:  # the rest must come from the same model: ask before
                    info = self._replica(i, deadline, fresh=True)
                    resume.check_model(info, address)
                    decoder.provenance = capture_provenance(info, address)
                # Raw bytes in: StreamDecoder.feed_all reads chunk data in place, and
                # decodes large chunks on the codec pool while the next message is read.
                capture_rpc = channel.unary_stream(
                    CAPTURE_METHOD,
                    request_serializer=pb.CaptureRequest.SerializeToString,
                    response_deserializer=None,
                )
                call = capture_rpc(
                    part, timeout=deadline - time.monotonic(), metadata=channels.metadata
                )
                first, named = True, ""
                for message in call:
                    if first:  # which model answers: the call names it
                        first = False
                        sent = _named_weights(call, message)
                        if asked:  # the rest, checked before it was asked: confirmed
                            info = _as_named(info, sent)
                            resume.check_model(info, address)
                        else:  # a stream of several examples may need resuming
                            info = self._answering(i, sent, deadline, fresh=len(part.texts) > 1)
                            asked = True
                        # What a resume must match: the weights the call named, even where
                        # GetModelInfo failed just then (a faulty network: info None)
                        named = sent or (info.weights if info is not None else "")
                        decoder.provenance = capture_provenance(info, address)
                    for capture in decoder.feed_all(message):  # one message, 0 or more
                        requests.check_answer(part, capture, address)
                        resume.received(capture, named, address)
                        if not (policy == "skip" and self._over(capture, part.generate)):
                            yield capture
                decoder.finish()
                return
            except grpc.RpcError as e:
                misses = 0 if resume.done > before else misses + 1
                give_up = not channels.retries or misses > channels.retries  # 0: never again
                if not channels.retryable(e) or give_up:
                    raise AttentionServiceError.from_rpc_error(e, address) from None
                failed.add(i)
            except WireError as e:
                raise AttentionServiceError(grpc.StatusCode.DATA_LOSS, str(e), address) from None
            finally:
                self.wire_bytes += decoder.wire_bytes
                decoder.close()  # chunks still waiting for the codec pool: dropped
                if call is not None:
                    call.cancel()  # no-op after completion; drops the server's work otherwise
            time.sleep(
                backoff_delay(max(0, misses - 1), channels.backoff, deadline - time.monotonic())
            )

    def _over(self, capture: Capture, generate: int) -> bool:
        """Whether too_long="skip" leaves `capture` out: its text was cut, or, asked to
        generate, its prompt + `generate` exceed the model's positions (what the local
        engine skips before generating; the server generated until they were full)."""
        if capture.truncated:
            return True
        if not generate:
            return False
        return capture.generated_start + generate > self.model_info().max_positions

    def __repr__(self) -> str:
        return f"AttentionClient({', '.join(self._channels.addresses)})"


def _named_weights(call, first: bytes) -> str:
    """The weights fingerprint a Capture call names ("" if none): in the first header
    of its first message `first` (CaptureRequest.weights_in_header), else, from a
    server that predates the field or a request without it, in its initial metadata."""
    return stream_weights(first) or dict(call.initial_metadata() or ()).get(
        codecs.WEIGHTS_METADATA, ""
    )


def _as_named(info: ModelInfo | None, sent: str) -> ModelInfo | None:
    """`info`, with the weights the call named (`sent`) where it named others
    (GetModelInfo reached another replica than the one answering, behind one address)."""
    if info is None or not sent or info.weights == sent:
        return info
    return dataclasses.replace(info, weights=sent)
