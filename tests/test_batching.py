"""Batch planning: every example exactly once, budgets held, shapes bounded."""

from __future__ import annotations

import random

import pytest

from jaxattn.engine import batching


def _plan(lengths, devices=1, **kw):
    budgets = batching.Budgets(**{**dict(output_bytes=10_000, tokens=512, max_batch=16), **kw})
    return batching.plan_batches(
        lengths, batching.buckets_for(67), lambda t: 10 * t * t, budgets, devices=devices
    )


def test_buckets_are_capped_at_the_model_limit():
    assert batching.buckets_for(67) == (8, 16, 24, 32, 40, 48, 56, 64, 67)
    assert batching.buckets_for(512)[-1] == 512
    assert batching.buckets_for(514 - 2)[-1] == 512


@pytest.mark.parametrize("seed", range(5))
def test_plan_covers_every_example_once_within_budgets(seed):
    rng = random.Random(seed)
    lengths = [rng.randint(2, 67) for _ in range(rng.randint(1, 300))]
    plan = _plan(lengths)
    rows = [r for b in plan for r in b.rows]
    assert sorted(rows) == list(range(len(lengths)))
    for b in plan:
        assert b.size == len(b.rows)  # no padded rows
        assert b.size & (b.size - 1) == 0  # a power of two
        assert all(lengths[r] <= b.length for r in b.rows)
        assert b.size * b.length <= 512 or b.size == 1
        assert b.size * 10 * b.length**2 <= 10_000 or b.size == 1
        assert b.size <= 16


def test_examples_go_to_the_smallest_bucket_that_fits():
    plan = _plan([2, 8, 9, 16, 17, 67])
    where = {r: b.length for b in plan for r in b.rows}
    assert where == {0: 8, 1: 8, 2: 16, 3: 16, 4: 24, 5: 67}


def test_remainders_split_into_powers_of_two():
    plan = _plan([10] * 35, max_batch=64, tokens=10_000, output_bytes=10**9)
    assert [b.size for b in plan] == [32, 2, 1]


def test_shape_count_is_bounded():
    seen = set()
    rng = random.Random(0)
    for _ in range(50):
        lengths = [rng.randint(2, 67) for _ in range(rng.randint(1, 100))]
        seen |= {(b.length, b.size) for b in _plan(lengths)}
    assert len(seen) <= batching.max_shapes(batching.buckets_for(67), 16)


def test_batch_size_is_at_least_one_even_over_budget():
    budgets = batching.Budgets(output_bytes=1, tokens=1, max_batch=8)
    assert batching.batch_size(64, lambda t: 10**12, budgets) == 1


@pytest.mark.parametrize("devices", [2, 4])
def test_data_parallel_batches_are_multiples_of_the_device_count(devices):
    rng = random.Random(devices)
    lengths = [rng.randint(2, 67) for _ in range(137)]
    plan = _plan(lengths, devices=devices)
    assert sorted(r for b in plan for r in b.rows) == list(range(len(lengths)))
    for b in plan:
        assert b.size % devices == 0
        assert len(b.rows) == b.size or (len(b.rows) < devices and b.size == devices)
        assert b.size // devices <= 16  # max_batch is per device
