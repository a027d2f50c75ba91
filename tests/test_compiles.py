"""Compiled shapes stay bounded; nothing recompiles once every shape has been seen."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest
from compile_events import backend_compiles

import jaxattn
from jaxattn.engine import batching
from jaxattn.engine.ablation import HeadAblation
from jaxattn.errors import UsageError


@pytest.fixture(scope="module")
def engine(bert_checkpoint):
    # Few buckets and batch sizes: the test compiles every shape of a spec.
    # Buckets 16 and the model's limit (67): few shapes to warm, every text still fits.
    return jaxattn.load(bert_checkpoint, buckets=(16,), max_batch=4)


def test_no_recompiles_after_warmup(engine):
    spec = engine.make_spec(what=("attention", "sum_alpha_fx_norm"), dtype="uint8")
    before = engine.compiled_shapes
    warmed = engine.warmup(spec)
    bound = batching.max_shapes(engine.buckets, engine.budgets)
    assert 0 < warmed - before <= bound
    rng = random.Random(0)
    words = "the store went to i at fresh bought strawberries".split()
    with backend_compiles() as compiles:
        for _ in range(6):
            texts = [
                " ".join(rng.choices(words, k=rng.randint(0, 40)))
                for _ in range(rng.randint(1, 40))
            ]
            engine.capture(texts, what=spec.what, dtype="uint8")
    assert engine.compiled_shapes == warmed
    assert compiles == []  # warmup compiled ahead of time; the calls ran what it made


def test_other_specs_do_not_disturb_a_warm_spec(engine):
    spec = engine.make_spec(what="attention", layers=(1,), heads=(0, 2))
    engine.warmup(spec)
    n = engine.compiled_shapes
    engine.capture(["i went to the store ."] * 3, what="attention", layers=1, heads=[2, 0])
    assert engine.compiled_shapes == n


def test_a_first_capture_pads_rather_than_compiling_and_gives_the_same_numbers(bert_checkpoint):
    # 21 texts of one bucket: split, 16 + 4 + 1 (three shapes); rented padding, one of 32.
    texts = [("i went to the store .", "the store", "at")[i % 3] for i in range(21)]
    splitting = jaxattn.load(bert_checkpoint, buckets=(16,), max_batch=32, compile_tokens=0)
    renting = jaxattn.load(bert_checkpoint, buckets=(16,), max_batch=32)
    want = splitting.capture(texts, what="attention")
    got = renting.capture(texts, what="attention")
    assert (splitting.compiled_shapes, renting.compiled_shapes) == (3, 1)
    for g, w in zip(got, want, strict=True):
        assert g.tokens == w.tokens
        np.testing.assert_allclose(g.attention, w.attention, rtol=0, atol=1e-6)
    key = (renting.make_spec("attention"), False)  # the spec, no heads ablated
    assert renting.shapes.compiled == {(key, 16, 32)}
    assert renting.shapes.rent == {(key, 16, 16): 11 * 16}  # 11 dummy rows of 16 tokens
    # Ablated heads are a program of their own: after 16 plain texts compiled (16, 16),
    # 21 ablated ones still pad up to one new shape (32), not 16 + 8 (two).
    fresh = jaxattn.load(bert_checkpoint, buckets=(16,), max_batch=32)
    fresh.capture(texts[:16], what="attention")
    fresh.capture(texts, what="attention", ablation=HeadAblation.of([(0, 1)]))
    assert fresh.compiled_shapes == 2


def test_warming_the_largest_size_compiles_one_shape_per_bucket_and_pads_into_it(
    bert_checkpoint,
):
    engine = jaxattn.load(bert_checkpoint, buckets=(16,), max_batch=4)
    spec = engine.make_spec(what="attention")
    assert engine.warmup(spec, sizes="largest") == len(engine.buckets) == 2  # 16 and 67
    texts = ["i went to the store .", "the store", "at"]  # 3 rows of bucket 16: 4, no compile
    with backend_compiles() as compiles:
        got = engine.capture(texts, what="attention")
        got += engine.capture(texts[:1], what="attention")  # 1 row pads to 4, not compile 1
    assert engine.compiled_shapes == 2 and compiles == []
    key = (spec, False)
    assert engine.shapes.rent == {(key, 16, 1): 3 * 16}  # 3 dummy rows rented against size 1
    exact = jaxattn.load(bert_checkpoint, buckets=(16,), max_batch=4, compile_tokens=0)
    with backend_compiles() as compiles:  # the counter sees compiles where there are some
        want = exact.capture(texts + texts[:1], what="attention")
    assert len(compiles) == exact.compiled_shapes == 1  # 4 rows of bucket 16: (4, 16)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.attention, w.attention, rtol=0, atol=1e-6)
    with pytest.raises(UsageError, match="unknown warmup sizes 'some': valid are all, largest"):
        engine.warmup(spec, sizes="some")


def test_a_warmup_told_to_stop_ends_before_its_next_shape(bert_checkpoint):
    engine = jaxattn.load(bert_checkpoint, buckets=(16,), max_batch=4)
    asked = []

    def stop():  # what a server's SIGTERM flag answers: stop after two shapes
        asked.append(1)
        return len(asked) > 2

    spec = engine.make_spec(what="attention")
    with backend_compiles() as compiles:
        assert engine.warmup(spec, stop=stop) == 2
    assert len(compiles) == 2 and len(asked) == 3


def test_compile_threads_follow_the_host_and_the_shapes():
    from jaxattn.engine.pipeline import compile_threads

    assert compile_threads(5, cpus=2) == 1  # the 2-core machine: one compile uses both
    assert compile_threads(5, cpus=16) == 5  # never more threads than shapes
    assert compile_threads(40, cpus=64) == 8
    assert compile_threads(0, cpus=16) == 1


def test_new_shapes_compile_in_threads_and_give_the_serial_numbers(bert_checkpoint, monkeypatch):
    # Texts of two buckets in batches of 4 and 1: several new shapes in one call.
    texts = ["i went to the store ."] * 5 + [" ".join(["fresh strawberries"] * 14)] * 2
    serial = jaxattn.load(bert_checkpoint, buckets=(16,), max_batch=4, compile_tokens=0)
    threaded = jaxattn.load(bert_checkpoint, buckets=(16,), max_batch=4, compile_tokens=0)
    threaded.pipeline.compile_threads = 3
    threads = []
    compile_one = threaded.step.compile

    def recording(*args):
        threads.append(threading.current_thread().name)
        compile_one(*args)

    monkeypatch.setattr(threaded.step, "compile", recording)
    want = serial.capture(texts, what=("attention", "fx_norm"))
    got = threaded.capture(texts, what=("attention", "fx_norm"))
    assert threaded.compiled_shapes == serial.compiled_shapes >= 3
    assert len(threads) == threaded.compiled_shapes
    assert all(name.startswith("jaxattn-compile") for name in threads)
    for g, w in zip(got, want, strict=True):
        assert g.tokens == w.tokens
        for name in ("attention", "fx_norm"):
            np.testing.assert_array_equal(g.tensors[name], w.tensors[name])
    with backend_compiles() as compiles:  # what the threads compiled is what the calls run
        threaded.capture(texts, what=("attention", "fx_norm"))
    assert compiles == []


def test_a_threaded_warmup_leaves_nothing_to_compile(bert_checkpoint):
    engine = jaxattn.load(bert_checkpoint, buckets=(16,), max_batch=4)
    engine.pipeline.compile_threads = 3
    spec = engine.make_spec(what="attention")
    assert engine.warmup(spec) == batching.max_shapes(engine.buckets, engine.budgets)
    with backend_compiles() as compiles:
        engine.capture(["i went to the store .", "at"] * 3, what="attention")
    assert compiles == []
