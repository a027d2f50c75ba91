"""Generation's scheduling in the service: a step per batcher turn, so a long generation
does not hold the engine from a concurrent capture; a cancelled one stops between
steps; a cut stream resumes from the first example not received, with the same
continuation (greedy generation is deterministic)."""

from __future__ import annotations

import threading
import time

import grpc
import numpy as np
import pytest
from local_server import fake_service

from jaxattn.client import AttentionClient
from jaxattn.engine.generate import longest
from jaxattn.v1 import attention_pb2 as pb
from service.admitted_call import Job
from service.generation import GenerationAsk
from service.micro_batching import JobCancelled, MicroBatcher

STEPS = 24  # new tokens of the long generation (stop_at_eos off: exactly this many steps)
CAPTURE = "/jaxattn.v1.AttentionService/Capture"
INFO = "/jaxattn.v1.AttentionService/GetModelInfo"


@pytest.fixture
def batcher(svc_gpt2):
    b = MicroBatcher(svc_gpt2, queue_size=8, window_s=0.0, max_batch_examples=8)
    b.start()
    yield b
    b.close(timeout=10)


def _generating(batcher, engine, text: str, new: int, deadline=None):
    spec = engine.make_spec(what=["attention"])
    prompts = engine.tokenize([text])
    ask = GenerationAsk(tuple(prompts), new, stop_at_eos=False)
    worst = [longest(p, new, engine.config.max_length) for p in prompts]
    return batcher.submit(spec, worst, deadline, generation=ask)


def _wait(predicate, what: str, timeout: float = 20.0):
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, f"{what} not reached within {timeout}s"
        time.sleep(0.005)


def test_a_long_generation_does_not_hold_the_engine_from_a_plain_capture(
    batcher, svc_gpt2, monkeypatch
):
    """The plain capture, sent just after the generation started, finishes while the
    generation has most of its steps left (its steps take turns with other work). The
    steps are counted from the capture's submission: on a loaded machine the test's own
    thread may wake late after the first step, and after the capture's result, while the
    worker goes on stepping: the count is read as the worker puts that result."""
    put, at_put = Job.put, []

    def counted(job, index, cap):
        at_put.append((job, batcher.stats["generation_steps"]))
        return put(job, index, cap)

    monkeypatch.setattr(Job, "put", counted)
    long = _generating(batcher, svc_gpt2, "The quick brown fox", STEPS)
    _wait(lambda: batcher.stats["generation_steps"] >= 1, "the first step")
    steps_before = batcher.stats["generation_steps"]
    plain = batcher.submit(
        svc_gpt2.make_spec(what=["attention"]), svc_gpt2.tokenize(["hello world"])
    )
    ((index, cap),) = list(plain.results())
    steps_then = next(steps for job, steps in at_put if job is plain)
    assert index == 0 and cap.generated_start is None
    got = [c for _, c in long.results()]
    assert batcher.stats["generation_steps"] == STEPS
    assert batcher.stats["generated_tokens"] == STEPS
    waited = steps_then - steps_before
    assert steps_then < STEPS, "the capture waited for the whole generation"
    assert waited < STEPS // 2, f"the capture waited for {waited} of {STEPS} steps"
    want = svc_gpt2.capture(
        ["The quick brown fox"], what=["attention"], generate=STEPS, stop_at_eos=False
    )
    assert got[0].tokens == want[0].tokens and got[0].generated_start == want[0].generated_start
    np.testing.assert_allclose(got[0].tensors["attention"], want[0].tensors["attention"], atol=1e-6)
    for job in (long, plain):
        batcher.release(job)


def test_a_cancelled_generation_stops_between_steps(batcher, svc_gpt2):
    job = _generating(batcher, svc_gpt2, "Hello, world. Hello,", STEPS)
    _wait(lambda: batcher.stats["generation_steps"] >= 1, "the first step")
    job.cancel()
    # dropped while it waited for its next turn, or abandoned after the step it was in
    _wait(lambda: batcher.stats["dropped"] + batcher.stats["abandoned"] >= 1, "the job dropped")
    steps = batcher.stats["generation_steps"]
    # the worker is free: a later capture runs, and the cancelled job took no more steps
    plain = batcher.submit(svc_gpt2.make_spec(what=["attention"]), svc_gpt2.tokenize(["hello"]))
    assert len(list(plain.results())) == 1
    assert batcher.stats["generation_steps"] == steps < STEPS
    with pytest.raises(JobCancelled):
        list(job.results())
    batcher.release(job)
    batcher.release(plain)


def _generating_many(batcher, engine, asks):
    """Submit one generating job per (text, new, stop_at_eos)."""
    spec = engine.make_spec(what=["attention"])
    jobs = []
    for text, new, eos in asks:
        prompts = engine.tokenize([text])
        ask = GenerationAsk(tuple(prompts), new, stop_at_eos=eos)
        worst = [longest(p, new, engine.config.max_length) for p in prompts]
        jobs.append(batcher.submit(spec, worst, None, generation=ask))
    return jobs


def _local(engine, asks):
    return [
        engine.capture([t], what=["attention"], generate=n, stop_at_eos=e)[0] for t, n, e in asks
    ]


def test_waiting_generations_run_as_one(svc_gpt2):
    """Three generating calls queued together (different N, one with EOS off) run as one
    shared run: a step is a token of all three, so 5 turns generate what 3 + 5 + 4 turns
    did one call at a time; each call gets its own continuation, as the local engine's."""
    asks = [("The quick brown fox", 3, True), ("Hello, world.", 5, False), ("a", 4, True)]
    b = MicroBatcher(svc_gpt2, queue_size=8, window_s=0.0, max_batch_examples=8)
    jobs = _generating_many(b, svc_gpt2, asks)  # queued before the worker starts
    b.start()
    try:
        got = [[c for _, c in job.results()][0] for job in jobs]
        assert b.stats["merged_generations"] == 2
        assert b.stats["generation_steps"] <= 5 + 2  # the longest, and a turn each to leave
    finally:
        for job in jobs:
            b.release(job)
        b.close(timeout=10)
    want = _local(svc_gpt2, asks)
    for g, w in zip(got, want, strict=True):
        assert (g.tokens, g.generated_start, g.stop) == (w.tokens, w.generated_start, w.stop)


def test_generations_sent_within_the_window_run_as_one(svc_gpt2):
    # A running batcher: the first call's first step waits out the window (as a capture
    # does), so the two sent right after it join its run; without merging, none does.
    asks = [("The quick brown fox", 4, False), ("Hello, world.", 4, False), ("a", 4, False)]
    for merge, merged in ((True, 2), (False, 0)):
        b = MicroBatcher(svc_gpt2, queue_size=8, window_s=0.5, max_batch_examples=8, merge=merge)
        b.start()
        try:
            jobs = _generating_many(b, svc_gpt2, asks)
            got = [[c for _, c in job.results()][0] for job in jobs]
            assert b.stats["merged_generations"] == merged
        finally:
            for job in jobs:
                b.release(job)
            b.close(timeout=10)
    assert [g.tokens for g in got] == [w.tokens for w in _local(svc_gpt2, asks)]


def test_a_call_that_leaves_a_shared_run_leaves_the_others_theirs(svc_gpt2):
    asks = [("Hello, world. Hello,", STEPS, False), ("The quick brown fox", 8, False)]
    b = MicroBatcher(svc_gpt2, queue_size=8, window_s=0.0, max_batch_examples=8)
    gone, kept = _generating_many(b, svc_gpt2, asks)
    b.start()
    try:
        _wait(lambda: b.stats["generation_steps"] >= 2, "two steps")
        gone.cancel()
        (got,) = [cap for _, cap in kept.results()]
        assert b.stats["merged_generations"] == 1
        with pytest.raises(JobCancelled):
            list(gone.results())
    finally:
        for job in (gone, kept):
            b.release(job)
        b.close(timeout=10)
    assert got.tokens == _local(svc_gpt2, asks[1:])[0].tokens


def test_at_most_cached_generations_hold_their_caches_at_once(batcher, svc_gpt2, monkeypatch):
    """A and B start one after the other (each alone); C and D, sent while both run, wait
    until one has ended, then run as one: at most CACHED_GENERATIONS runs hold key/value
    caches at a time, and every call finishes with its own continuation."""
    import service.generation as generation

    runs, peak, sizes = {}, [], []
    step = generation.SharedGeneration.step

    def counting(self, engine):
        if not self.started:
            sizes.append(len(self.asks))
        made = step(self, engine)
        runs[id(self)] = self
        peak.append(sum(1 for r in runs.values() if not r._run.done))
        return made

    monkeypatch.setattr(generation.SharedGeneration, "step", counting)
    batcher.join = False  # B would join A's run (test_service_generate_joining)
    asks = [("The quick brown fox", STEPS, False), ("Hello, world.", STEPS, False)]
    asks += [("a", 6, False), ("one two three", 6, False)]
    (a,) = _generating_many(batcher, svc_gpt2, asks[:1])
    _wait(lambda: batcher.stats["generation_steps"] >= 1, "A's first step")
    (b,) = _generating_many(batcher, svc_gpt2, asks[1:2])
    _wait(lambda: len(sizes) == 2, "B's first step")
    c, d = _generating_many(batcher, svc_gpt2, asks[2:])
    jobs = [a, b, c, d]
    got = [[cap for _, cap in job.results()][0] for job in jobs]
    assert max(peak) == generation.CACHED_GENERATIONS == 2 and sizes == [1, 1, 2]
    want = _local(svc_gpt2, asks)
    assert [g.tokens for g in got] == [w.tokens for w in want]
    for job in jobs:
        batcher.release(job)


def test_a_cancelled_generation_lets_go_of_its_caches(batcher, svc_gpt2, monkeypatch):
    import gc
    import weakref

    from jaxattn.engine import kv_cache

    groups = []
    start = kv_cache.KVDecoder.start

    def keep(self, *a, **k):
        group = start(self, *a, **k)
        groups.append(weakref.ref(group))
        return group

    monkeypatch.setattr(kv_cache.KVDecoder, "start", keep)
    job = _generating(batcher, svc_gpt2, "Hello, world. Hello,", STEPS)
    _wait(lambda: batcher.stats["generation_steps"] >= 2, "two steps")
    job.cancel()
    _wait(lambda: batcher.stats["dropped"] + batcher.stats["abandoned"] >= 1, "dropped")
    gc.collect()
    assert len(groups) == 1 and groups[0]() is None  # while the call's job still exists
    batcher.release(job)


def test_a_generation_past_its_deadline_takes_no_step(batcher, svc_gpt2):
    job = _generating(batcher, svc_gpt2, "a", STEPS, deadline=time.monotonic() - 1)
    with pytest.raises(JobCancelled):
        list(job.results())
    assert batcher.stats["dropped"] == 1 and batcher.stats["generation_steps"] == 0
    batcher.release(job)


class CutOnce:
    """A stand-in server in front of the real one: the first Capture call is cut
    (UNAVAILABLE) after the first example's messages; every request is recorded."""

    def __init__(self, target: str):
        self.channel = grpc.insecure_channel(target)
        self.requests: list[pb.CaptureRequest] = []
        self.lock = threading.Lock()

    def capture(self, request, context):
        with self.lock:
            self.requests.append(request)
            first = len(self.requests) == 1
        call = self.channel.unary_stream(
            CAPTURE,
            request_serializer=pb.CaptureRequest.SerializeToString,
            response_deserializer=None,
        )(request, timeout=60)
        headers = 0
        for message in call:
            headers += pb.CaptureResponse.FromString(message).HasField("header")
            if first and headers == 2:  # the second example starts: cut here
                call.cancel()
                context.abort(grpc.StatusCode.UNAVAILABLE, "cut")
            yield message

    def info(self, request, context):
        return self.channel.unary_unary(
            INFO,
            request_serializer=pb.GetModelInfoRequest.SerializeToString,
            response_deserializer=pb.ModelInfo.FromString,
        )(request, timeout=30)


def test_a_cut_stream_resumes_with_the_same_continuations(svc_gpt2, gpt2_address):
    texts = ["The quick brown fox", "Hello, world. Hello,", "a"]
    kw = dict(what=["attention"], generate=6)
    proxy = CutOnce(gpt2_address)
    with fake_service(proxy.capture, proxy.info) as front:
        with AttentionClient(front, timeout=60, retries=3, backoff=(0.01, 0.02)) as c:
            c.coalesce = False  # one item per message: the cut lands between examples
            got = c.capture(texts, **kw)
    proxy.channel.close()
    asked = [[t.text for t in r.texts] for r in proxy.requests]
    assert asked == [texts, texts[1:]]
    assert all(r.generate == 6 and not r.ignore_eos for r in proxy.requests)
    want = svc_gpt2.capture(texts, **kw)
    assert [c.text for c in got] == texts  # each example once, in order
    for g, w in zip(got, want, strict=True):
        assert g.tokens == w.tokens and g.generated_start == w.generated_start
        np.testing.assert_allclose(g.tensors["attention"], w.tensors["attention"], atol=1e-6)
