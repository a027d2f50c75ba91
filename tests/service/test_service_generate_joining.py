"""Continuous batching in the service: a generating call that arrives while another's
shared run steps joins that run between two steps (`SharedGeneration.join`), counted in
the batcher's `joined_generations`; each call gets the continuation it gets alone (the
local engine's); a joined call that leaves ends only its own prompts; a call whose
continuation needs more than the run's caches starts its own run."""

from __future__ import annotations

import time

import pytest

import service.generation as generation
from jaxattn.engine.generate import longest
from service.generation import GenerationAsk
from service.micro_batching import JobCancelled, MicroBatcher

LONG = 24  # tokens of the first call (stop_at_eos off: exactly this many steps)


def _submit(batcher, engine, text: str, new: int):
    prompts = engine.tokenize([text])
    ask = GenerationAsk(tuple(prompts), new, stop_at_eos=False)
    worst = [longest(p, new, engine.config.max_length) for p in prompts]
    return batcher.submit(engine.make_spec(what=["attention"]), worst, None, generation=ask)


def _wait(predicate, what: str, timeout: float = 20.0):
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, f"{what} not reached within {timeout}s"
        time.sleep(0.002)


def _alone(engine, text: str, new: int):
    return engine.capture([text], what=["attention"], generate=new, stop_at_eos=False)[0]


@pytest.fixture
def runs(monkeypatch):
    """The shared generations whose first step ran, in order (a spy on their steps)."""
    seen = []
    step = generation.SharedGeneration.step

    def spy(self, engine):
        if not self.started:
            seen.append(self)
        return step(self, engine)

    monkeypatch.setattr(generation.SharedGeneration, "step", spy)
    return seen


def _batcher(engine, join=True):
    b = MicroBatcher(engine, queue_size=8, window_s=0.0, max_batch_examples=8, join=join)
    b.start()
    return b


def test_a_call_arriving_while_a_run_steps_joins_it(svc_gpt2, runs):
    # B's 13 tokens + 8 fit A's cache (25 tokens of "The quick brown fox" + 23 fed: 64)
    b = _batcher(svc_gpt2)
    try:
        a = _submit(b, svc_gpt2, "The quick brown fox", LONG)
        _wait(lambda: b.stats["generation_steps"] >= 2, "A's second step")
        late = _submit(b, svc_gpt2, "Hello, world.", 8)
        got = [[cap for _, cap in job.results()][0] for job in (a, late)]
        assert b.stats["joined_generations"] == 1 and b.stats["merged_generations"] == 0
        (run,) = runs  # one run: B's first step was a step of A's
        assert len(run.asks) == 2 and run.spans == [range(0, 1), range(1, 2)]
        # A's 24 steps, with B's 8 among them (a turn of B's steps the run too) and
        # the turn each takes to collect its continuation
        assert b.stats["generation_steps"] <= LONG + 2
    finally:
        for job in (a, late):
            b.release(job)
        b.close(timeout=10)
    want = [_alone(svc_gpt2, "The quick brown fox", LONG), _alone(svc_gpt2, "Hello, world.", 8)]
    for g, w in zip(got, want, strict=True):
        assert (g.tokens, g.generated_start, g.stop) == (w.tokens, w.generated_start, w.stop)


def test_joining_off_starts_a_run_of_its_own(svc_gpt2, runs):
    b = _batcher(svc_gpt2, join=False)
    try:
        a = _submit(b, svc_gpt2, "The quick brown fox", LONG)
        _wait(lambda: b.stats["generation_steps"] >= 2, "A's second step")
        late = _submit(b, svc_gpt2, "Hello, world.", 8)
        for job in (a, late):
            list(job.results())
        assert b.stats["joined_generations"] == 0 and len(runs) == 2
    finally:
        for job in (a, late):
            b.release(job)
        b.close(timeout=10)


def test_a_joined_call_that_leaves_ends_only_its_prompts(svc_gpt2, runs):
    b = _batcher(svc_gpt2)
    try:
        a = _submit(b, svc_gpt2, "The quick brown fox", LONG)
        _wait(lambda: b.stats["generation_steps"] >= 2, "A's second step")
        gone = _submit(b, svc_gpt2, "Hello, world.", LONG)
        _wait(lambda: b.stats["joined_generations"] == 1, "the join")
        steps = b.stats["generation_steps"]
        _wait(lambda: b.stats["generation_steps"] >= steps + 2, "two shared steps")
        gone.cancel()
        (got,) = [cap for _, cap in a.results()]
        with pytest.raises(JobCancelled):
            list(gone.results())
        (run,) = runs
        assert run._run.ended == {1} and run._run.stops[0] == "max_new_tokens"
    finally:
        for job in (a, gone):
            b.release(job)
        b.close(timeout=10)
    assert got.tokens == _alone(svc_gpt2, "The quick brown fox", LONG).tokens


def test_a_call_whose_need_exceeds_the_runs_cache_starts_its_own(svc_gpt2, runs):
    # A: 1 token + 13 fed (a cache of 16); B's 25 + 23 positions do not fit it
    b = _batcher(svc_gpt2)
    try:
        a = _submit(b, svc_gpt2, "a", 14)
        _wait(lambda: b.stats["generation_steps"] >= 1, "A's first step")
        late = _submit(b, svc_gpt2, "The quick brown fox", LONG)
        got = [[cap for _, cap in job.results()][0] for job in (a, late)]
        assert b.stats["joined_generations"] == 0 and len(runs) == 2
    finally:
        for job in (a, late):
            b.release(job)
        b.close(timeout=10)
    assert got[1].tokens == _alone(svc_gpt2, "The quick brown fox", LONG).tokens


def test_a_server_joins_on_an_accelerator_unless_told(svc_gpt2):
    from types import SimpleNamespace

    from jaxattn.cli import build_parser
    from jaxattn.cli.serve_cmd import server_options
    from service import create_server

    gpu = SimpleNamespace(devices=[SimpleNamespace(platform="gpu")])
    assert generation.joins_by_default(gpu)
    assert not generation.joins_by_default(svc_gpt2)  # the CPU: a step costs its rows
    assert not generation.joins_by_default(SimpleNamespace())  # a double: no devices
    for told, want in ((None, False), (True, True), (False, False)):
        server, _ = create_server(svc_gpt2, "127.0.0.1:0", join_generations=told)
        try:
            assert server.batcher.join is want, told
        finally:
            server.stop(0)
    for flag, want in (("auto", None), ("on", True), ("off", False)):
        args = build_parser().parse_args(["serve", "--join-generations", flag])
        assert server_options(args).join_generations is want, flag
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--join-generations", "yes"])


def test_a_request_that_left_a_merged_run_before_it_started_is_never_generated(svc_gpt2):
    ask = GenerationAsk(tuple(svc_gpt2.tokenize(["one two", "three"])), 5, stop_at_eos=False)
    other = GenerationAsk(tuple(svc_gpt2.tokenize(["four five six"])), 5, stop_at_eos=False)
    shared = generation.SharedGeneration([ask, other])
    shared.end(shared.spans[0])  # its call went before the first step
    made = [shared.step(svc_gpt2) for _ in range(6)]
    assert made == [1, 1, 1, 1, 1, 0]  # only the other call's prompt, 5 tokens
    assert shared.over(shared.spans[0]) and shared.over(shared.spans[1])
    want = _alone(svc_gpt2, "four five six", 5).tokens
    assert tuple(shared.sequences(shared.spans[1])[0].tokens) == tuple(want)


def test_a_merged_job_not_yet_started_does_not_pass_the_cache_bound_by_a_join(
    svc_gpt2, monkeypatch
):
    # Two runs hold caches and a third could be joined: a job already merged into a run
    # of its own (not started) waits, as it would start that run, not join; an unmerged
    # job may go (it joins).
    from types import SimpleNamespace

    b = MicroBatcher(svc_gpt2, queue_size=8, window_s=0.0, max_batch_examples=8)
    monkeypatch.setattr(b._generations, "held", lambda pending: {1: object(), 2: object()})
    monkeypatch.setattr(b._generations, "joinable", lambda job, pending: object())
    ask = GenerationAsk(tuple(svc_gpt2.tokenize(["one"])), 3)
    run = generation.GenerationRun(ask)
    job = SimpleNamespace(dead=False, generation=run)
    assert b._may_start(job)  # it joins
    run.shared = generation.SharedGeneration([ask])  # merged, its own run not started
    assert not b._may_start(job)
