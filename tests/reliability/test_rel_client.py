"""The client's retry policy against a scripted server: what is retried, how often, how long."""

from __future__ import annotations

import threading
import time

import grpc
import numpy as np
import pytest
from local_server import fake_service

from jaxattn.capture import Capture
from jaxattn.client import AttentionClient, AttentionServiceError
from jaxattn.client.channels import backoff_delay
from jaxattn.errors import UsageError
from jaxattn.v1 import attention_pb2 as pb
from jaxattn.wire import serialize_example

CAP = Capture(
    tokens=("[CLS]", "a", "[SEP]"),
    sentence_b_start=None,
    layers=(0,),
    heads=(0,),
    dtype="float32",
    tensors={"attention": np.full((1, 1, 3, 3), 1 / 3, np.float32)},
)


class Script:
    """A fake AttentionService: call k fails with `fails[k]` (after `sent_first` messages).

    Only the method called first is scripted and counted in `calls`: the client's
    GetModelInfo for a capture's provenance (after its first message) just answers.
    """

    def __init__(self, fails, sent_first: int = 0, weights: str = "blake2b:fake"):
        self.fails = list(fails)
        self.weights = weights
        self.sent_first = sent_first
        self.calls: list[float] = []
        self.texts: list[list[str]] = []  # each Capture call's texts
        self.method: str | None = None
        self.lock = threading.Lock()

    def _count(self, method: str) -> int | None:
        """This call's number among the scripted calls; None when it is not scripted."""
        with self.lock:
            self.method = self.method or method
            if method != self.method:
                return None
            self.calls.append(time.monotonic())
            return len(self.calls) - 1

    def capture(self, request, context):
        k = self._count("capture")
        self.texts.append([t.text for t in request.texts])
        k = len(self.fails) if k is None else k
        messages = list(serialize_example(0, CAP, codec="none", max_chunk_bytes=1 << 20))
        if k < len(self.fails) and self.fails[k] is not None:
            yield from messages[: self.sent_first]
            context.abort(self.fails[k], f"scripted failure {k}")
        yield from messages

    def info(self, request, context):
        k = self._count("info")
        if k is not None and k < len(self.fails) and self.fails[k] is not None:
            context.abort(self.fails[k], f"scripted failure {k}")
        return pb.ModelInfo(name="fake", layers=1, heads=1, weights=self.weights)


def scripted(script: Script):
    return fake_service(script.capture, script.info)


U = grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("method", ["capture", "model_info"])
def test_unavailable_is_retried_with_growing_capped_backoff(method, monkeypatch):
    import jaxattn.client.channels as channels_module
    import jaxattn.client.client as client_module

    delays = []  # the waits the client chose (wall-time gaps only bound them from below:
    # a loaded machine may wake a sleeper late)
    chosen = channels_module.backoff_delay

    def recorded(attempt, backoff, remaining):
        delays.append(chosen(attempt, backoff, remaining))
        return delays[-1]

    for module in (channels_module, client_module):
        monkeypatch.setattr(module, "backoff_delay", recorded)
    script = Script([U, U, U, U])
    with scripted(script) as address:
        with AttentionClient(address, timeout=10, retries=4, backoff=(0.05, 0.12)) as client:
            if method == "capture":
                (cap,) = client.capture(["a"])
                np.testing.assert_array_equal(cap.attention, CAP.attention)
            else:
                assert client.model_info().name == "fake"
    assert len(script.calls) == 5 and len(delays) == 4
    # doubling from 0.05, capped at 0.12, each jittered in [1/2, 1] of its bound
    for delay, bound in zip(delays, (0.05, 0.1, 0.12, 0.12), strict=True):
        assert bound / 2 <= delay <= bound, delays
    gaps = np.diff(script.calls)
    assert all(gap >= 0.95 * delay for gap, delay in zip(gaps, delays, strict=True))


@pytest.mark.parametrize(
    "code",
    [
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNAUTHENTICATED,
    ],
)
def test_other_failures_are_not_retried(code):
    script = Script([code])
    with scripted(script) as address:
        with AttentionClient(address, timeout=10, retries=5, backoff=(0.01, 0.02)) as client:
            with pytest.raises(AttentionServiceError) as info:
                client.capture(["a"])
    assert info.value.code == code and "scripted failure 0" in info.value.message
    assert len(script.calls) == 1


@pytest.mark.parametrize("method", ["capture", "model_info"])
def test_a_cancelled_the_client_did_not_cause_is_retried(method):
    """A stopping gRPC server answers CANCELLED to calls it never started (grpc#41785)."""
    script = Script([grpc.StatusCode.CANCELLED, U])
    with scripted(script) as address:
        with AttentionClient(address, timeout=10, retries=3, backoff=(0.01, 0.02)) as client:
            if method == "capture":
                (cap,) = client.capture(["a"])
                np.testing.assert_array_equal(cap.attention, CAP.attention)
            else:
                assert client.model_info().name == "fake"
    assert len(script.calls) == 3


def test_a_call_cancelled_by_closing_the_client_is_not_retried():
    started = threading.Event()

    class Slow(Script):
        def capture(self, request, context):
            with self.lock:
                self.calls.append(time.monotonic())
            started.set()
            while context.is_active():
                time.sleep(0.01)
            yield from ()

    script = Slow([])
    with scripted(script) as address:
        client = AttentionClient(address, timeout=10, retries=5, backoff=(0.01, 0.02))
        threading.Thread(target=lambda: (started.wait(5), client.close()), daemon=True).start()
        with pytest.raises(AttentionServiceError) as info:
            client.capture(["a"])
    assert info.value.code == grpc.StatusCode.CANCELLED
    assert len(script.calls) == 1


def test_unavailable_after_data_resumes_from_the_first_example_not_received():
    """Examples already handed to the caller are not asked again: the rest is (more:
    tests/service/test_replicas.py)."""
    script = Script([U], sent_first=2)  # the whole first example, then the failure
    with scripted(script) as address:
        with AttentionClient(address, timeout=10, retries=5, backoff=(0.01, 0.02)) as client:
            stream = client.stream(["a", "b"])
            assert next(stream).text == "a"
            assert [c.text for c in stream] == ["b"]
    assert script.texts == [["a", "b"], ["b"]]


def test_unavailable_after_data_is_not_resumed_without_a_weights_fingerprint():
    """A replica that does not say which weights it serves cannot be checked: no resume."""
    script = Script([U], sent_first=2, weights="")
    with scripted(script) as address:
        with AttentionClient(address, timeout=10, retries=5, backoff=(0.01, 0.02)) as client:
            stream = client.stream(["a", "b"])
            assert next(stream).tokens == CAP.tokens
            with pytest.raises(AttentionServiceError) as info:
                next(stream)
    assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "weights unknown" in info.value.message
    assert len(script.calls) == 1


def test_resumes_never_outlive_the_timeout_and_retries_0_turns_them_off():
    """Every attempt delivers one example, then fails: progress each time, so only the
    deadline ends it, with the examples received so far named."""
    script = Script([U] * 10_000, sent_first=2)
    with scripted(script) as address:
        with AttentionClient(address, timeout=0.8, retries=3, backoff=(0.05, 0.1)) as client:
            start, got = time.monotonic(), []
            with pytest.raises(AttentionServiceError) as info:
                got.extend(client.stream(["a"] * 1000))
            assert time.monotonic() - start < 0.8 + 0.5
        assert info.value.code in (U, grpc.StatusCode.DEADLINE_EXCEEDED)
        # each attempt brought one new example (the last perhaps none: the time was up)
        assert 2 <= len(script.calls) - 1 <= len(got) <= len(script.calls) < 30
        with AttentionClient(address, timeout=5, retries=0) as client:
            stream = client.stream(["a", "b"])
            next(stream)
            with pytest.raises(AttentionServiceError) as info:
                next(stream)
        assert info.value.code == U


@pytest.mark.parametrize("method", ["capture", "model_info"])
def test_retries_never_outlive_the_timeout(method):
    script = Script([U] * 1000)
    with scripted(script) as address:
        with AttentionClient(address, timeout=0.8, retries=1000, backoff=(0.05, 0.3)) as client:
            start = time.monotonic()
            with pytest.raises(AttentionServiceError) as info:
                client.capture(["a"]) if method == "capture" else client.model_info()
            assert time.monotonic() - start < 0.8 + 0.5
    assert info.value.code in (U, grpc.StatusCode.DEADLINE_EXCEEDED)
    assert 2 <= len(script.calls) < 30


def test_backoff_delay_doubles_is_jittered_capped_and_stops_at_the_deadline():
    for attempt in range(12):
        base = min(2.0, 0.1 * 2**attempt)
        delays = [backoff_delay(attempt, (0.1, 2.0), 100.0) for _ in range(200)]
        assert base * 0.5 <= min(delays) and max(delays) <= base
        assert max(delays) - min(delays) > base * 0.2  # actually spread out
    assert backoff_delay(10, (0.1, 2.0), 0.05) <= 0.05
    assert backoff_delay(3, (0.1, 2.0), -1.0) == 0.0


def test_bad_retry_settings_are_refused():
    for kwargs in (
        dict(retries=-1),
        dict(backoff=(0, 1)),
        dict(backoff=(2, 1)),
        dict(timeout=0),
        dict(timeout=None),
    ):
        with pytest.raises(UsageError):
            AttentionClient("127.0.0.1:1", **kwargs)


def test_a_resume_checks_the_weights_the_call_named_when_model_info_failed():
    """A faulty network (tests/reliability/test_rel_netfault_replicas.py, once in a run):
    the first message names the weights (its header), GetModelInfo fails just then, the
    stream is cut after an example. The resume is checked against the named weights,
    not refused as "weights unknown"."""
    weights = "blake2b:fake"

    class Flaky:
        def __init__(self):
            self.captures, self.infos, self.texts = 0, 0, []

        def capture(self, request, context):
            self.captures += 1
            self.texts.append([t.text for t in request.texts])
            named = weights if request.weights_in_header else ""
            messages = [
                m
                for k, text in enumerate(request.texts)
                for m in serialize_example(
                    k, CAP, codec="none", max_chunk_bytes=1 << 20, weights="" if k else named
                )
            ]
            if self.captures == 1:  # the first example, then the cut
                yield from messages[:2]
                context.abort(U, "cut")
            yield from messages

        def info(self, request, context):
            self.infos += 1
            if self.infos == 1:  # asked at the first message: the network drops it
                context.abort(U, "info lost")
            return pb.ModelInfo(name="fake", layers=1, heads=1, weights=weights)

    script = Flaky()
    with fake_service(script.capture, script.info) as address:
        with AttentionClient(address, timeout=10, retries=5, backoff=(0.01, 0.02)) as client:
            got = list(client.stream(["a", "b"]))
    assert [c.text for c in got] == ["a", "b"]
    assert script.texts == [["a", "b"], ["b"]]
