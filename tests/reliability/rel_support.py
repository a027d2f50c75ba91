"""Helpers of the reliability tests: servers, engines with faults, a TCP proxy, raw calls.

Imported by name (`from rel_support import ...`): tests/reliability is on
sys.path, and a second module called `conftest` would clash with tests/service's.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import grpc
import numpy as np
from hf_fixtures import EXAMPLE_A, EXAMPLE_B
from local_server import running_server  # noqa: F401  (the tests import it from here)

from jaxattn.capture import Capture
from jaxattn.dtypes import OUTPUT_DTYPES
from jaxattn.quantities import QUANTITIES
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import StreamDecoder

# Sentences of the tiny WordPiece vocabulary, all under 32 tokens (one bucket).
SENTENCES = (
    EXAMPLE_A,
    EXAMPLE_B,
    "the quick brown fox jumps over the lazy dog",
    "the cat sat on the mat",
    "she was a cat and he was a dog",
    "they ran to the store with the dog",
)
WHAT = ("attention",)  # the spec (nearly) every test shares: few compiles
MARKER = "hello world"  # FaultyEngine fails batches holding this text
CAPTURE = "/jaxattn.v1.AttentionService/Capture"


def wait_for(predicate, timeout: float = 10.0, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, f"{what} not reached within {timeout}s"
        time.sleep(0.01)


def assert_right(caps, texts, expected) -> None:
    """Every capture is the right answer to its text (`expected`: the conftest fixture)."""
    from jaxattn.bench.expect import check_answer

    problem = check_answer(caps, [expected[t] for t in texts])
    assert problem is None, problem


class EngineProxy:
    """The real engine, with hooks on `run` (subclasses override `rows`)."""

    def __init__(self, engine):
        self.engine = engine
        self.info = engine.info
        self.make_spec = engine.make_spec
        self.tokenize = engine.tokenize
        self.output_bytes = engine.output_bytes
        self.yielded = 0
        self.runs = 0

    def run(self, tokenized, spec):
        self.runs += 1
        return self.rows(tokenized, spec)

    def rows(self, tokenized, spec):
        for item in self.engine.run(tokenized, spec):
            self.yielded += 1
            yield item


class SlowEngine(EngineProxy):
    """Takes `delay` seconds per example: streams last long enough to break them."""

    def __init__(self, engine, delay: float):
        super().__init__(engine)
        self.delay = delay

    def rows(self, tokenized, spec):
        for item in super().rows(tokenized, spec):
            time.sleep(self.delay)
            yield item


class FaultyEngine(EngineProxy):
    """Raises inside any batch that holds MARKER's tokens: mid-run, or at once if `eager`."""

    def __init__(self, engine, eager: bool = False):
        super().__init__(engine)
        self.eager = eager
        self.marker = engine.tokenize([MARKER])[0].ids

    def run(self, tokenized, spec):
        bad = any(e.ids == self.marker for e in tokenized)
        if bad and self.eager:
            raise RuntimeError("injected engine fault (at call)")
        return self.rows(tokenized, spec) if not bad else self._fail(tokenized, spec)

    def _fail(self, tokenized, spec):
        yield from []
        raise RuntimeError("injected engine fault (in batch)")


class ShapeEngine:
    """The real engine's validation and tokenizer; `run` yields zeros of the right shapes."""

    def __init__(self, engine):
        self.info = engine.info
        self.make_spec = engine.make_spec
        self.tokenize = engine.tokenize
        self.output_bytes = engine.output_bytes

    def run(self, tokenized, spec):
        i = self.info
        for pos, e in enumerate(tokenized):
            sizes = dict(
                L=len(spec.layers),
                H=len(spec.heads),
                T=e.length,
                S=e.length,
                K=i.head_dim,
                D=i.hidden,
            )
            tensors = {}
            for name in spec.what:
                shape = [sizes[a] for a in QUANTITIES[name].axes]
                shape[0] += name == "hidden_states"
                tensors[name] = np.zeros(shape, OUTPUT_DTYPES[spec.dtype])
            quant = {n: (1 / 255, 0.0) for n in tensors} if spec.dtype == "uint8" else {}
            yield (
                pos,
                Capture(
                    tokens=e.tokens,
                    sentence_b_start=e.sentence_b_start,
                    layers=spec.layers,
                    heads=spec.heads,
                    dtype=spec.dtype,
                    tensors=tensors,
                    quantization=quant,
                ),
            )


class Proxy:
    """A TCP proxy to a server, to break the network under a live call.

    `pause()` stops forwarding server -> client (a client that reads nothing);
    `cut()` resets every connection at once (a client that vanished).
    """

    def __init__(self, target: str):
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.running = threading.Event()
        self.running.set()  # cleared = paused
        self.conns: list[socket.socket] = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            upstream.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
            self.conns += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, down: bool) -> None:
        try:
            while True:
                if down:
                    self.running.wait()
                data = src.recv(16384)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def pause(self) -> None:
        self.running.clear()

    def resume(self) -> None:
        self.running.set()

    def cut(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
                conn.shutdown(socket.SHUT_RDWR)  # wakes the pumps blocked on it
            with contextlib.suppress(OSError):
                conn.close()  # linger 0: a reset, as when a host vanishes
        self.conns = []
        self.running.set()

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        self.cut()


def raw_capture(channel, request_bytes: bytes, timeout: float = 30.0, metadata=()):
    """Send raw request bytes; returns (status code, details, Captures decoded)."""
    call = channel.unary_stream(CAPTURE, request_serializer=None, response_deserializer=None)
    decoder, caps = StreamDecoder(), []
    stream = call(request_bytes, timeout=timeout, metadata=metadata)
    try:
        for message in stream:
            cap = decoder.feed_bytes(message)
            if cap is not None:
                caps.append(cap)
        decoder.finish()
    except grpc.RpcError as e:
        return e.code(), e.details() or "", caps
    return grpc.StatusCode.OK, "", caps


def request_bytes(texts, what=WHAT, **fields) -> bytes:
    items = [
        pb.Text(text=t) if isinstance(t, str) else pb.Text(text=t[0], text_pair=t[1]) for t in texts
    ]
    return pb.CaptureRequest(texts=items, what=list(what), **fields).SerializeToString()
