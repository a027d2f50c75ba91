"""`capture_iter`: any iterable of texts, in input order, in bounded memory, with the
long-text policy and a progress callback (`jaxattn.CaptureStream`)."""

from __future__ import annotations

import gc
import itertools
from pathlib import Path

import numpy as np
import pytest
from hf_fixtures import long_text

from jaxattn.capture import Capture
from jaxattn.errors import InputError, TooLongError, UsageError
from jaxattn.stream import CaptureStream

WORDS = "the cat sat on a mat while dogs ran far away from home".split()


def texts(n: int, words: int = 8):
    """A generator (not a list) of `n` distinct sentences."""
    for i in range(n):
        yield " ".join(WORDS[(i + j) % len(WORDS)] for j in range(words)) + f" {i}"


def test_yields_in_input_order_equal_to_capture(engines):
    engine = engines["bert"]
    want = engine.capture(list(texts(12)), what=("attention", "alpha_fx_norm"), layers=-1)
    got = list(
        engine.capture_iter(texts(12), what=("attention", "alpha_fx_norm"), layers=-1, window=5)
    )
    assert [c.text for c in got] == [c.text for c in want]
    for a, b in zip(got, want, strict=True):  # other batch shapes: float32 rounding only
        np.testing.assert_allclose(a.attention, b.attention, rtol=0, atol=1e-5)
        np.testing.assert_allclose(a.alpha_fx_norm, b.alpha_fx_norm, rtol=1e-5, atol=1e-5)


def test_skip_truncate_and_progress_name_the_input_indices(engines, tokenizers):
    engine = engines["bert"]
    long = long_text(tokenizers["bert"], 80)
    inputs = ["short one", long, "short two", long, long]
    seen = []
    stream = engine.capture_iter(iter(inputs), too_long="skip", progress=seen.append, window=2)
    assert [c.text for c in stream] == ["short one", "short two"]
    assert stream.skipped == [1, 3, 4] and stream.truncated == [] and stream.done == 5
    assert [None if c is None else c.text for c in seen] == [
        "short one",
        None,
        "short two",
        None,
        None,
    ]
    stream = engine.capture_iter(inputs, too_long="truncate", window=3)
    caps = list(stream)
    assert stream.truncated == [1, 3, 4] and [c.truncated for c in caps] == [0, 1, 0, 1, 1]
    assert all(c.length == engine.config.max_length for c in caps if c.truncated)
    with pytest.raises(TooLongError) as e:  # named by its place in the input, not the window
        list(engine.capture_iter(["a", "b", "c", long], window=2))
    assert e.value.index == 3 and e.value.length > e.value.limit == engine.config.max_length
    with pytest.raises(InputError, match="text 2 is not valid UTF-8"):
        list(engine.capture_iter(["a", "b", "c\udcff"], window=2))


def test_a_bad_request_fails_before_any_text_is_read(engines):
    def never():
        raise AssertionError("read")
        yield

    with pytest.raises(UsageError, match="layer 9"):
        engines["bert"].capture_iter(never(), layers=9)
    with pytest.raises(UsageError, match="window"):
        engines["bert"].capture_iter(["a"], window=0)
    assert len(list(engines["bert"].capture_iter(["a", "b"], window=np.int64(1)))) == 2


class _Echo:
    """A source whose captures are empty but carry their text (no jax)."""

    def stream(self, chunk, too_long, **request):
        for t in chunk:
            if "LONG" in t and too_long == "skip":
                continue
            yield Capture(
                tokens=("x",),
                sentence_b_start=None,
                layers=(0,),
                heads=(0,),
                dtype="float32",
                tensors={},
                text=t,
            )


def test_skipped_texts_are_found_by_text_even_when_texts_repeat():
    inputs = ["a", "LONG", "a", "a", "LONG", "b", "LONG"]
    stream = CaptureStream(_Echo(), inputs, window=3, too_long="skip")
    assert [c.text for c in stream] == ["a", "a", "a", "b"]
    assert stream.skipped == [1, 4, 6]


def _peak_rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux peak RSS")
def test_peak_memory_does_not_grow_with_the_corpus(engines):
    """10x the texts (about 200 MB of output in all) raise the peak RSS by a small
    constant: each capture is dropped as consumed, one window is in flight."""
    engine = engines["bert"]
    what = ("attention", "scores", "alpha_fx_norm")
    per_example = 3 * 3 * 3 * 45 * 45 * 4  # 3 quantities [L=3, H=3, T, T] float32, T >= 45

    def peak_growth(n: int) -> int:
        gc.collect()
        _reset_peak()
        start = _peak_rss_kb()
        for cap in engine.capture_iter(texts(n, words=24), what=what, window=16):
            assert cap.length >= 45
        return _peak_rss_kb() - start

    peak_growth(32)  # compile every shape first
    small, large = peak_growth(100), peak_growth(1000)
    assert large - small < 40_000, (small, large)  # kB: a constant, not 900 x per_example
    assert 900 * per_example > 150_000_000  # what holding them all would have cost


def test_the_stream_takes_any_iterable_lazily(engines):
    counter = itertools.count()
    pulled = []

    def gen():
        for t in texts(50):
            pulled.append(next(counter))
            yield t

    stream = engines["bert"].capture_iter(gen(), window=10)
    next(stream)
    assert len(pulled) == 10  # one window read, not the corpus


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        ("one text", "not a single string: wrap it in a list"),
        (None, "texts must be an iterable of strings or .a, b. pairs, got NoneType"),  # TypeError
        (3, "got int"),
    ],
)
def test_capture_iter_refuses_what_is_no_iterable_of_texts_at_once(texts, message):
    with pytest.raises(UsageError, match=message):
        CaptureStream(None, texts, window=2)  # before any source is asked


def test_capture_iter_refuses_a_progress_that_is_no_function_at_once():
    # was a TypeError "'int' object is not callable" at the first capture
    with pytest.raises(UsageError, match="progress must be a function of one argument.*got int"):
        CaptureStream(None, ["a"], window=2, progress=3)
