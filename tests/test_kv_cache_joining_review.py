"""Review of joining (`Continuations.add`/`joins`): a prompt added to a run does not
jump ahead of the run's own prompts waiting for a later group. The reference is the
order the run promised them (`_waiting`: after the group generating), and each prompt
generated alone by the engine (`Engine.generate`)."""

from __future__ import annotations

import pytest
from generate_support import MAKERS

import jaxattn
from jaxattn.engine.generate import Continuations

TEXTS = ["abcd", "efgh", "ijkl", "mn"]  # 4, 3, 4 and 2 tokens


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """The tiny GPT-2, at most 2 sequences a group: three prompts need two groups."""
    path = MAKERS["gpt2"](tmp_path_factory.mktemp("gpt2"))
    engine = jaxattn.load(path, buckets=(32,), max_batch=2)
    return engine, engine.tokenize(TEXTS)


def test_a_prompt_does_not_join_while_the_runs_own_prompts_wait_for_a_later_group(gpt2):
    engine, prompts = gpt2
    assert [p.length for p in prompts] == [4, 3, 4, 2]
    # needs 5, 10 and 4: prompts 1 and 0 generate first, prompt 2 waits for their end
    run = Continuations(engine, prompts[:3], [2, 8, 1], stop_at_eos=False)
    assert run._waiting == [[1, 0], [2]]
    run.step()
    run.step()  # prompt 0's two tokens: its row is free, prompt 1 has 6 to go
    assert run.over([0]) and not run.over([1])
    # a late prompt of 12 tokens would fit the free row, but taking it would keep the
    # group generating 12 steps where prompt 1 needs 6: prompt 2, there first, would
    # wait for it (and for any prompt joining after it: no bound)
    assert not run.joins(prompts[3:4], 12)
    assert run.add(prompts[3:4], 12, stop_at_eos=False, join_only=True) is None
    assert run.add(prompts[3:4], 12, stop_at_eos=False) == [3]  # queued behind prompt 2
    steps = 0
    while not run.over([2]):
        run.step()
        steps += 1
    assert steps == 6 + 1  # prompt 1's last 6 tokens, then prompt 2's one
    while not run.done:
        run.step()
    alone = [
        engine.generate([t], n, stop_at_eos=False)[0].ids
        for t, n in zip(TEXTS, [2, 8, 1, 12], strict=True)
    ]
    assert [g.ids for g in run.results()] == alone


def test_a_prompt_arriving_between_the_runs_groups_starts_with_the_next(gpt2, monkeypatch):
    # The group generating has ended and one group of the run's prompts waits: a late
    # prompt that fits that group joins it (starts with it at the next step: behind
    # none of the run's prompts, delaying none) rather than needing a run of its own.
    from jaxattn.engine import kv_cache

    engine, prompts = gpt2
    start, started = kv_cache.KVDecoder.start, []

    def spy(self, group_prompts, *args, **kwargs):
        started.append(len(group_prompts))
        return start(self, group_prompts, *args, **kwargs)

    monkeypatch.setattr(kv_cache.KVDecoder, "start", spy)
    news = [2, 3, 4, 3]
    run = Continuations(engine, prompts[:3], news[:3], stop_at_eos=False)
    assert [len(g) for g in run._waiting] == [2, 1]
    run.step()
    while not run.over(run._rows.values()):  # the first group's last token
        run.step()
    assert run._waiting and started == [2]
    assert run.joins(prompts[3:4], news[3])
    assert run.add(prompts[3:4], news[3], stop_at_eos=False, join_only=True) == [3]
    while not run.done:
        run.step()
    assert started == [2, 2]  # the late prompt in the run's second group
    alone = [
        engine.generate([t], n, stop_at_eos=False)[0].ids for t, n in zip(TEXTS, news, strict=True)
    ]
    assert [g.ids for g in run.results()] == alone


def test_a_prompt_arriving_between_groups_takes_no_later_group_or_a_full_one(gpt2):
    # Joining the last of two groups waiting would put it behind the first of them;
    # a last group already at the largest batch (2 here) holds no more.
    engine, prompts = gpt2
    for members, waiting in ((prompts[:3] + prompts[:2], [2, 1]), (prompts, [2])):
        run = Continuations(engine, members, 2, stop_at_eos=False)
        run.step()
        run.step()
        assert run.over(run._rows.values()) and [len(g) for g in run._waiting] == waiting
        assert not run.joins(prompts[3:4], 2)
        assert run.add(prompts[3:4], 2, stop_at_eos=False, join_only=True) is None
