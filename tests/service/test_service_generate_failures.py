"""A shared generation whose step failed (`service.generation.SharedGeneration`): every
call in it fails, none waits on it for ever. A first step that raises leaves the run
with no group (its prompts popped from the waiting ones and never generated): before
this review, the other calls merged into it stepped it for ever, each turn making no
token, their clients waiting until their deadlines. The engine's failure is simulated
(`KVDecoder.start` raising as XLA would)."""

from __future__ import annotations

import time

import jax
import pytest

from jaxattn.engine import kv_cache
from jaxattn.engine.generate import longest
from service.generation import GenerationAsk, GenerationRun, merge
from service.micro_batching import EngineFailed, MicroBatcher

BROKEN = "INTERNAL: the device broke"


@pytest.fixture
def broken_start(monkeypatch):
    """`KVDecoder.start` raises, as XLA does on a device failure, `times` times."""
    start, left = kv_cache.KVDecoder.start, {"times": 1}

    def failing(self, *args, **kwargs):
        if left["times"] > 0:
            left["times"] -= 1
            raise jax.errors.JaxRuntimeError(BROKEN)
        return start(self, *args, **kwargs)

    monkeypatch.setattr(kv_cache.KVDecoder, "start", failing)
    return left


def _ask(engine, text: str, new: int = 4) -> GenerationAsk:
    return GenerationAsk(tuple(engine.tokenize([text])), new, stop_at_eos=False)


def test_a_run_whose_first_step_failed_fails_every_call_merged_into_it(svc_gpt2, broken_start):
    a, b = GenerationRun(_ask(svc_gpt2, "one two")), GenerationRun(_ask(svc_gpt2, "three"))
    assert len(merge(svc_gpt2, [a, b])) == 2 and a.shared is b.shared
    with pytest.raises(jax.errors.JaxRuntimeError, match="the device broke"):
        a.step(svc_gpt2)
    # b's prompt was in the group that failed to start: its turn fails too (it used to
    # make 0 tokens a turn, never over), without running the engine again
    assert broken_start["times"] == 0
    for _ in range(2):
        with pytest.raises(jax.errors.JaxRuntimeError, match="the device broke"):
            b.step(svc_gpt2)


def test_a_run_whose_step_failed_is_not_joined(svc_gpt2, monkeypatch):
    a = GenerationRun(_ask(svc_gpt2, "one two three four five", 12))
    assert a.step(svc_gpt2) == (1, None)
    late = _ask(svc_gpt2, "three")
    assert a.shared.joins(late)  # room in its group

    def broken(self, held=()):
        raise jax.errors.JaxRuntimeError(BROKEN)

    monkeypatch.setattr(kv_cache.Group, "step", broken)
    with pytest.raises(jax.errors.JaxRuntimeError, match="the device broke"):
        a.step(svc_gpt2)
    monkeypatch.undo()  # its caches may be gone: the run stays failed all the same
    assert not a.shared.joins(late) and a.shared.join(late) is None
    with pytest.raises(jax.errors.JaxRuntimeError, match="the device broke"):
        a.step(svc_gpt2)


def _wait(predicate, what: str, timeout: float = 20.0):
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, f"{what} not reached within {timeout}s"
        time.sleep(0.002)


def _submit(batcher, engine, text: str, new: int = 4):
    ask = _ask(engine, text, new)
    worst = [longest(p, new, engine.config.max_length) for p in ask.prompts]
    return batcher.submit(engine.make_spec(what=["attention"]), worst, None, generation=ask)


def test_the_batcher_fails_every_call_of_a_failed_shared_run(svc_gpt2, broken_start):
    b = MicroBatcher(svc_gpt2, queue_size=8, window_s=0.0, max_batch_examples=8)
    jobs = [_submit(b, svc_gpt2, t) for t in ("one two", "three", "four five")]
    b.start()  # after the three came: they merge into one run on the first turn
    try:
        # (polled, not read: a call left stepping the broken run would wait for ever)
        _wait(lambda: all(j.error is not None for j in jobs), "every call's failure")
        for job in jobs:
            with pytest.raises(EngineFailed, match="the device broke"):
                list(job.results())
        assert b.stats["merged_generations"] == 2
        assert b.stats["generation_steps"] == 3  # one failed turn each, none requeued
        assert b.stats["generated_tokens"] == 0 and b.pending == 0
        # the next call runs as ever, its continuation its own
        jobs.append(_submit(b, svc_gpt2, "three"))
        (got,) = [cap for _, cap in jobs[-1].results()]
    finally:
        for job in jobs:
            b.release(job)
        b.close(timeout=10)
    want = svc_gpt2.capture(["three"], what=["attention"], generate=4, stop_at_eos=False)[0]
    assert got.tokens == want.tokens


OOM = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.00GiB."


def test_a_join_out_of_memory_is_not_counted_and_waits_its_next_turn(svc_gpt2, monkeypatch):
    # The run under way holds a group of one row: "three" joins it by growing it, and
    # the device runs out of memory prefilling it (`Continuations.add` answers None).
    # The call's turn ends there, not joined: not counted, and it neither steps the run
    # nor starts one of its own past the cache bound (its next turn decides).
    import collections
    import threading
    from types import SimpleNamespace

    from service.generation_turns import GenerationTurns

    run = GenerationRun(_ask(svc_gpt2, "one two three four five", 12))
    run.step(svc_gpt2)
    tokens = run.shared._run.grown[0][:]
    turns = GenerationTurns(svc_gpt2, collections.Counter())
    lock = threading.Lock()
    under_way = SimpleNamespace(generation=run, dead=False)
    late = SimpleNamespace(generation=GenerationRun(_ask(svc_gpt2, "three")), lock=lock)
    with lock:
        assert (
            turns.ready(late, [under_way, late], [under_way, late], join=True, window_s=None)
            is None
        )
    assert late.generation.joining is run.shared
    empty = kv_cache.KVDecoder.empty

    def short(self, shape):
        if shape.batch == 1:  # the joining prompt's prefill group
            raise jax.errors.JaxRuntimeError(OOM)
        return empty(self, shape)

    monkeypatch.setattr(kv_cache.KVDecoder, "empty", short)
    assert turns.step(late) == (0, None)
    gen = late.generation
    assert gen.shared is None and gen.joining is None and not gen.started
    assert run.shared._run.grown[0] == tokens and len(run.shared.asks) == 1
    assert turns.stats["joined_generations"] == 0
    # the run under way is closed to joins now: the next turn does not try again
    with lock:
        assert turns.joinable(late, [under_way, late]) is None


def test_a_call_merged_into_a_run_that_failed_to_start_does_not_wait_for_a_cache_slot(
    svc_gpt2, monkeypatch
):
    # Its run failed making its continuations (no caches held): its turn, which fails
    # it, is due at once, not once one of the runs holding caches has ended.
    a, b = GenerationRun(_ask(svc_gpt2, "one two")), GenerationRun(_ask(svc_gpt2, "three"))
    merge(svc_gpt2, [a, b])
    batcher = MicroBatcher(svc_gpt2, queue_size=8, window_s=0.0, max_batch_examples=8)

    def broken(*args, **kwargs):
        raise jax.errors.JaxRuntimeError(BROKEN)

    with monkeypatch.context() as m:
        m.setattr(svc_gpt2, "continuations", broken)
        with pytest.raises(jax.errors.JaxRuntimeError):
            a.step(svc_gpt2)
    assert not b.started
    turns = batcher._generations
    monkeypatch.setattr(turns, "held", lambda pending: {1: object(), 2: object()})
    job = _submit(batcher, svc_gpt2, "three")
    job.generation = b
    with job.lock:
        assert turns.may_start(job, [job], join=True)
    with pytest.raises(jax.errors.JaxRuntimeError, match="the device broke"):
        b.step(svc_gpt2)


def test_a_prompt_too_large_for_the_device_fails_its_own_call_only(svc_gpt2, monkeypatch):
    # The device holds no cache for B's long prompt even alone (DeviceMemoryError, after
    # the engine's halving): B fails with it, on whoever's turn it came; A, merged with
    # it, goes on with the continuation it has alone, never told of B's prompt.
    from jaxattn.errors import DeviceMemoryError

    start = kv_cache.KVDecoder.start

    def small_device(self, prompts, *args, **kwargs):
        if any(p.length > 10 for p in prompts):
            raise jax.errors.JaxRuntimeError(OOM)
        return start(self, prompts, *args, **kwargs)

    monkeypatch.setattr(kv_cache.KVDecoder, "start", small_device)
    long_text = "The quick brown fox jumps over the lazy dog"
    # B's second prompt fits: it ends with the call (no token for nobody)
    both = tuple(svc_gpt2.tokenize([long_text, "four"]))
    a, b = GenerationRun(_ask(svc_gpt2, "one two")), GenerationRun(GenerationAsk(both, 4))
    assert b.ask.prompts[0].length > 10 >= a.ask.prompts[0].length
    assert len(merge(svc_gpt2, [a, b])) == 2
    made, sequences = a.step(svc_gpt2)  # A's turn meets B's prompt first (the longest)
    assert made == 1 and sequences is None
    with pytest.raises(DeviceMemoryError, match=f"a prompt of {b.ask.prompts[0].length} tokens"):
        b.step(svc_gpt2)
    while sequences is None:
        made, sequences = a.step(svc_gpt2)
    want = svc_gpt2.generate(["one two"], 4, stop_at_eos=False)[0].sequence
    assert sequences[0].ids == want.ids
    assert a.shared.step(svc_gpt2) == 0  # B's "four" was never started for nobody
    # B's own turn meets it: that step goes on with A's (its tokens counted), and B
    # fails at its next turn
    a, b = GenerationRun(_ask(svc_gpt2, "one two")), GenerationRun(_ask(svc_gpt2, long_text))
    merge(svc_gpt2, [a, b])
    assert b.step(svc_gpt2) == (1, None)
    with pytest.raises(DeviceMemoryError):
        b.step(svc_gpt2)
    assert a.step(svc_gpt2) == (1, None)


def test_an_error_settling_a_step_fails_that_call_and_keeps_the_worker(svc_gpt2, monkeypatch):
    # Anything raising after the step (sizing the continuations for their capture,
    # here) fails its call; the worker lives on for the next (it used to die with it:
    # every call after it waited for ever).
    import service.generation_turns as turns

    sizes = turns.example_sizes
    monkeypatch.setattr(turns, "example_sizes", lambda *a: 1 / 0)
    b = MicroBatcher(svc_gpt2, queue_size=8, window_s=0.0, max_batch_examples=8)
    b.start()
    jobs = [_submit(b, svc_gpt2, "three", 1)]
    try:
        _wait(lambda: jobs[0].error is not None, "the call's failure")
        with pytest.raises(EngineFailed, match="ZeroDivisionError"):
            list(jobs[0].results())
        monkeypatch.setattr(turns, "example_sizes", sizes)
        jobs.append(_submit(b, svc_gpt2, "three", 1))
        (prompt,) = svc_gpt2.tokenize(["three"])
        assert [len(cap.tokens) for _, cap in jobs[1].results()] == [prompt.length + 1]
    finally:
        for job in jobs:
            b.release(job)
        b.close(timeout=10)
