"""`AttentionClient`: capture attention from a jaxattn server, as `Capture` objects."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Sequence

import grpc

from jaxattn.capture import Capture
from jaxattn.client.channels import Channels, backoff_delay
from jaxattn.client.errors import AttentionServiceError
from jaxattn.config import ModelInfo
from jaxattn.inputs import Text
from jaxattn.spec import check_precision
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import StreamDecoder, WireError, codecs

# Method paths, not the generated stubs: those pin grpcio to the grpcio-tools
# version that generated them, and the client needs nothing else from them.
CAPTURE_METHOD = "/jaxattn.v1.AttentionService/Capture"
INFO_METHOD = "/jaxattn.v1.AttentionService/GetModelInfo"


def _indices(value, field: str) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    try:
        return [int(v) for v in value]
    except (TypeError, ValueError):
        raise ValueError(f"{field} must be None, an integer or a list of integers") from None


def _texts(texts: Sequence[Text]) -> list[pb.Text]:
    if isinstance(texts, (str, bytes)):
        raise ValueError("texts must be a list of strings or (a, b) pairs: wrap it in a list")
    out = []
    for i, t in enumerate(texts):
        if isinstance(t, str):
            out.append(pb.Text(text=t))
        elif isinstance(t, (tuple, list)) and len(t) == 2 and all(isinstance(s, str) for s in t):
            out.append(pb.Text(text=t[0], text_pair=t[1]))
        else:
            raise ValueError(f"texts[{i}] must be a string or a (sentence_a, sentence_b) pair"
                             f" of strings, got {type(t).__name__}")  # fmt: skip
    return out


def _check_codec(codec: str) -> str:
    if codec not in codecs.CODEC_TO_PB:
        raise ValueError(f"unknown codec {codec!r}: valid are {', '.join(codecs.CODECS)}")
    return codec


def _check_precision(request: pb.CaptureRequest, capture: Capture, address: str) -> None:
    # A jaxattn 0.1 server ignores the precision field and computes at highest.
    asked = codecs.PB_TO_PRECISION.get(request.precision)
    if asked is not None and capture.precision != asked:
        raise AttentionServiceError(
            grpc.StatusCode.UNIMPLEMENTED,
            f"asked for precision {asked}, the server computed {capture.precision} "
            "(a server older than jaxattn 0.2 has only highest)",
            address,
        )


class AttentionClient:
    """A client of the jaxattn attention service; a `jaxattn.CaptureSource`.

    Imports no jax, flax or torch.

        with AttentionClient("127.0.0.1:50051") as client:
            caps = client.capture(["I went to the store."], what=("attention",),
                                  dtype="uint8", codec="zstd")

    Args:
      address: "host:port", or several: calls go to them in turn (round-robin)
        and a call that finds one UNAVAILABLE (or stopping) is retried on the next.
      token: bearer token, when the server wants one.
      tls: connect with TLS (implied by root_certificates).
      root_certificates: PEM CA bundle (bytes or a file path) to trust.
      server_name: the name to check the server's certificate against, if not
        the address's host.
      timeout: default deadline in seconds for each call, retries included.
        Every call has one: the client never waits forever.
      retries: extra attempts after UNAVAILABLE, or a CANCELLED the client did
        not cause, when nothing was received yet.
      backoff: (first, cap) retry delay in seconds, doubling, jittered.
      codec: the default wire compression of `capture`/`stream` (none, zstd, lz4).

    Attributes:
      wire_bytes: chunk payload bytes received so far by this client (after
        compression: what the codecs saved shows here).
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
    ):
        if timeout is None or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        _check_codec(codec)
        addresses = [address] if isinstance(address, str) else list(address)
        self._channels = Channels(
            addresses, tls=tls, root_certificates=root_certificates, server_name=server_name,
            token=token, retries=retries, backoff=backoff,
        )  # fmt: skip
        self.timeout = timeout
        self.codec = codec
        self.wire_bytes = 0

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
        for address, channel in zip(self._channels.addresses, self._channels._channels,
                                    strict=True):  # fmt: skip
            try:
                grpc.channel_ready_future(channel).result(timeout=timeout)
            except grpc.FutureTimeoutError:
                raise AttentionServiceError(
                    grpc.StatusCode.UNAVAILABLE, f"not ready within {timeout}s", address
                ) from None

    # -- calls ------------------------------------------------------------------------

    def model_info(self, timeout: float | None = None) -> ModelInfo:
        """The server's model (same fields as `Engine.info`).

        Raises:
          AttentionServiceError: the call failed.
        """
        info = self.server_info(timeout)
        return ModelInfo(
            name=info.name, family=info.family, layers=info.layers, heads=info.heads,
            hidden=info.hidden_size, head_dim=info.head_dim, vocab=info.vocab_size,
            max_positions=info.max_positions, dtype=info.dtype,
            precision=info.precision or "highest",  # a jaxattn 0.1 server says nothing
        )  # fmt: skip

    def server_info(self, timeout: float | None = None) -> pb.ModelInfo:
        """The raw GetModelInfo answer: the model plus quantities and request limits."""
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
        what: str | Iterable[str] | None = ("attention",),
        layers: Iterable[int] | int | None = None,
        heads: Iterable[int] | int | None = None,
        dtype: str = "float32",
        codec: str | None = None,
        *,
        truncate: bool = False,
        precision: str | None = None,
        max_chunk_bytes: int | None = None,
        timeout: float | None = None,
    ) -> list[Capture]:
        """Capture attention quantities for each text, like `Engine.capture`.

        Args:
          texts: strings, or (sentence_a, sentence_b) pairs.
          what: quantity names (see `jaxattn.QUANTITIES`).
          layers: layer indices, or None for all.
          heads: head indices, or None for all.
          dtype: float32 (exact), float16, bfloat16 or uint8.
          codec: wire compression: none, zstd or lz4 (lossless); None = the client's.
          truncate: cut over-long texts instead of failing.
          precision: compute precision ("highest", "tf32", "bf16"); None: the
            server's default (`model_info().precision`).
          max_chunk_bytes: chunk size bound (default: under 4 MiB).
          timeout: deadline in seconds (default: the client's).

        Returns:
          One Capture per text, in input order.

        Raises:
          ValueError: a malformed argument (caught before any call).
          AttentionServiceError: the server refused or failed the call (its
            status code and message), or the stream broke the protocol (DATA_LOSS).
        """
        return list(self.stream(texts, what, layers, heads, dtype, codec, truncate=truncate,
                                precision=precision, max_chunk_bytes=max_chunk_bytes,
                                timeout=timeout))  # fmt: skip

    def stream(
        self,
        texts: Sequence[Text],
        what: str | Iterable[str] | None = ("attention",),
        layers: Iterable[int] | int | None = None,
        heads: Iterable[int] | int | None = None,
        dtype: str = "float32",
        codec: str | None = None,
        *,
        truncate: bool = False,
        precision: str | None = None,
        max_chunk_bytes: int | None = None,
        timeout: float | None = None,
    ) -> Iterator[Capture]:
        """Like `capture`, but yield each example's Capture (in input order) as it arrives.

        Closing the iterator early cancels the call; the server drops the rest.
        """
        if dtype not in codecs.DTYPE_TO_PB:
            raise ValueError(f"unknown dtype {dtype!r}: valid are {', '.join(codecs.DTYPE_TO_PB)}")
        codec = self.codec if codec is None else _check_codec(codec)
        if precision is not None:
            check_precision(precision)
        request = pb.CaptureRequest(
            texts=_texts(texts),
            what=[what] if isinstance(what, str) else list(what or ()),
            layers=_indices(layers, "layers"),
            heads=_indices(heads, "heads"),
            dtype=codecs.DTYPE_TO_PB[dtype],
            codec=codecs.CODEC_TO_PB[codec],
            max_chunk_bytes=max_chunk_bytes or 0,
            truncate=truncate,
            precision=codecs.PRECISION_TO_PB[precision] if precision else 0,
        )
        return self._stream(request, self.timeout if timeout is None else timeout)

    def _stream(self, request: pb.CaptureRequest, timeout: float) -> Iterator[Capture]:
        deadline = time.monotonic() + timeout
        channels = self._channels
        for attempt in range(channels.retries + 1):
            i, channel = channels.next()
            address = channels.addresses[i]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AttentionServiceError(
                    grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer within {timeout}s", address
                )
            # Raw bytes in: StreamDecoder.feed_bytes reads chunk data in place.
            capture_rpc = channel.unary_stream(
                CAPTURE_METHOD,
                request_serializer=pb.CaptureRequest.SerializeToString,
                response_deserializer=None,
            )
            call = capture_rpc(request, timeout=remaining, metadata=channels.metadata)
            decoder = StreamDecoder()
            received = False
            try:
                for message in call:
                    received = True
                    capture = decoder.feed_bytes(message)
                    if capture is not None:
                        _check_precision(request, capture, address)
                        yield capture
                decoder.finish()
                return
            except grpc.RpcError as e:
                last = attempt == channels.retries
                # Only a call that delivered nothing can be retried transparently.
                if not channels.retryable(e) or received or last:
                    raise AttentionServiceError.from_rpc_error(e, address) from None
            except WireError as e:
                raise AttentionServiceError(grpc.StatusCode.DATA_LOSS, str(e), address) from None
            finally:
                self.wire_bytes += decoder.wire_bytes
                call.cancel()  # no-op after completion; drops the server's work otherwise
            time.sleep(backoff_delay(attempt, channels.backoff, deadline - time.monotonic()))

    def __repr__(self) -> str:
        return f"AttentionClient({', '.join(self._channels.addresses)})"
