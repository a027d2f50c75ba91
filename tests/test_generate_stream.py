"""Generation through the streaming API: `Engine.stream(..., generate=N)` and
`Engine.capture_iter(..., generate=N)` (windows of texts continued, then captured) give
the captures `capture(generate=N)` gives, in input order, with the long-text policy
naming input indices across windows."""

from __future__ import annotations

import numpy as np
import pytest
from generate_support import MAKERS, PROMPTS

import jaxattn
from jaxattn.errors import GenerationTooLongError, UsageError

NEW = 4
TEXTS = [*PROMPTS, "Hello there, cat", "b c d"]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    return jaxattn.load(MAKERS["gpt2"](tmp_path_factory.mktemp("gpt2")), buckets=(32,))


def long_prompt(engine, fits: bool) -> str:
    """A prompt that alone fits the positions but not with NEW tokens after it
    (`fits`), or one over the positions by itself."""
    limit = engine.config.max_length
    for n in range(1, 200):
        text = "fox " * n
        (t,) = engine.tokenize([text], too_long="truncate")
        if fits and t.length + NEW > limit and not t.truncated:
            return text
        if not fits and t.truncated:
            return text
    raise AssertionError("no such prompt")


def texts_of(items):
    yield from items  # a generator, as a corpus is read


def same(got, want) -> None:
    assert [c.tokens for c in got] == [c.tokens for c in want]
    assert [c.text for c in got] == [c.text for c in want]
    assert [c.generated_start for c in got] == [c.generated_start for c in want]
    for a, b in zip(got, want, strict=True):  # other batches: float32 rounding only
        np.testing.assert_allclose(a.attention, b.attention, rtol=0, atol=1e-5)


def test_stream_and_capture_iter_equal_capture_in_input_order(engine):
    want = engine.capture(TEXTS, generate=NEW, stop_at_eos=False, layers=[0, -1])
    gens = engine.generate(TEXTS, NEW, stop_at_eos=False)
    assert [c.generated_start for c in want] == [g.prompt.length for g in gens]
    assert [c.tokens for c in want] == [g.prompt.tokens + g.tokens for g in gens]
    got = list(engine.stream(TEXTS, generate=NEW, stop_at_eos=False, layers=[0, -1]))
    same(got, want)
    stream = engine.capture_iter(
        texts_of(TEXTS), generate=NEW, stop_at_eos=False, layers=[0, -1], window=2
    )
    same(list(stream), want)
    assert stream.skipped == [] and stream.truncated == [] and stream.done == len(TEXTS)
    # without generate, the same texts are captured as they are
    plain = list(engine.capture_iter(texts_of(TEXTS), layers=[0, -1], window=2))
    assert all(c.generated_start is None for c in plain)
    assert [c.length for c in plain] == [g.prompt.length for g in gens]


def test_capture_iter_skips_and_truncates_by_input_index(engine):
    grows, over = long_prompt(engine, fits=True), long_prompt(engine, fits=False)
    texts = ["a", grows, "b c d", over, "Hello there, cat"]
    args = dict(generate=NEW, stop_at_eos=False, layers=[-1])
    stream = engine.capture_iter(texts_of(texts), too_long="skip", window=2, **args)
    got = list(stream)
    assert stream.skipped == [1, 3] and [c.text for c in got] == ["a", "b c d", texts[4]]
    same(got, engine.capture([texts[i] for i in (0, 2, 4)], **args))
    stream = engine.capture_iter(texts_of(texts), too_long="truncate", window=2, **args)
    got = list(stream)
    assert stream.skipped == [] and stream.truncated == [3]
    limit = engine.config.max_length
    assert got[1].length == got[3].length == limit  # generated until the positions are full
    assert got[3].generated_start == limit  # cut to the limit: nothing generated after it
    same(got, engine.capture(texts, too_long="truncate", **args))


def test_capture_iter_names_the_input_index_of_a_prompt_too_long_to_continue(engine):
    grows = long_prompt(engine, fits=True)
    texts = ["a", "b c d", "Hello", grows]
    stream = engine.capture_iter(texts_of(texts), generate=NEW, window=2, layers=[-1])
    with pytest.raises(GenerationTooLongError) as e:
        list(stream)
    assert e.value.index == 3 and str(e.value).startswith("text 3: its ")
    assert f"+ {NEW} new tokens" in str(e.value)


def test_capture_iter_checks_the_generation_request_before_reading(engine):
    def never():
        raise AssertionError("read")
        yield

    with pytest.raises(UsageError, match="^generate must be at least 1, got 0"):
        engine.capture_iter(never(), generate=0)
    with pytest.raises(UsageError, match="^generate must be a whole number, got 1.5"):
        engine.stream(["a"], generate=1.5)
    # each call names the argument its caller gave: capture's generate, generate's N
    with pytest.raises(UsageError, match="^generate must be at least 1, got -2"):
        engine.capture(["a"], generate=-2)
    with pytest.raises(UsageError, match="^max_new_tokens must be at least 1, got -2"):
        engine.generate(["a"], max_new_tokens=-2)


def test_generation_arguments_of_the_wrong_kind_are_named(engine):
    # a truthy string is no EOS rule: it was iterated as one rule per character
    with pytest.raises(UsageError, match="^stop_at_eos must be True or False, got 'no'"):
        engine.generate(["a"], 2, stop_at_eos="no")
    (gen,) = engine.generate(["a"], 2, stop_at_eos=np.bool_(False))  # numpy's bool is one
    assert len(gen.ids) == 2 and gen.stop == "max_new_tokens"
    # as the client refuses it (a CaptureSource takes the same arguments either way)
    for call in (engine.capture, engine.stream, engine.capture_iter):
        with pytest.raises(UsageError, match="^stop_at_eos=False applies to generate"):
            call(["a"], stop_at_eos=False)
    # continuations steps planned prompts, not texts (was AttributeError: 'str' ... 'length')
    with pytest.raises(UsageError, match=r"^prompts\[0\] is a str: continuations takes"):
        engine.continuations(["a"], 2)
    prompts, _ = engine.plan_generation(["a"], 2)
    run = engine.continuations(prompts, 2, stop_at_eos=[False])
    while not run.done:
        run.step()
    assert [g.ids for g in run.results()] == [gen.ids]
