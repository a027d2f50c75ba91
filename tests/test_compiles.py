"""Compiled shapes stay bounded; nothing recompiles once every shape has been seen."""

from __future__ import annotations

import random

import pytest

import jaxattn
from jaxattn.engine import batching


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
    for _ in range(6):
        texts = [
            " ".join(rng.choices(words, k=rng.randint(0, 40))) for _ in range(rng.randint(1, 40))
        ]
        engine.capture(texts, what=spec.what, dtype="uint8")
    assert engine.compiled_shapes == warmed


def test_other_specs_do_not_disturb_a_warm_spec(engine):
    spec = engine.make_spec(what="attention", layers=(1,), heads=(0, 2))
    engine.warmup(spec)
    n = engine.compiled_shapes
    engine.capture(["i went to the store ."] * 3, what="attention", layers=1, heads=[2, 0])
    assert engine.compiled_shapes == n
