"""Batch planning: every example exactly once, budgets held, padding and shapes bounded."""

from __future__ import annotations

import random
import re
from types import SimpleNamespace

import numpy as np
import pytest

from jaxattn.engine import batching
from jaxattn.errors import UsageError


def _plan(lengths, devices=1, **kw):
    budgets = batching.Budgets(**{**dict(output_bytes=10_000, tokens=512, max_batch=16), **kw})
    return batching.plan_batches(
        lengths, batching.buckets_for(67), lambda t: 10 * t * t, budgets, devices=devices
    )


def test_buckets_are_capped_at_the_model_limit():
    assert batching.buckets_for(67) == (8, 16, 24, 32, 40, 48, 56, 64, 67)
    assert batching.buckets_for(512)[-1] == 512
    assert batching.buckets_for(514 - 2)[-1] == 512


@pytest.mark.parametrize(
    "buckets, says",
    [
        ("x", "a sequence of token counts, got 'x'"),
        (64, "a sequence of token counts, got 64"),
        ([8, 0], "whole numbers of tokens >= 1, got 0"),
        ([-5], "whole numbers of tokens >= 1, got -5"),
        ([8, 16.5], "whole numbers of tokens >= 1, got 16.5"),
        ([True], "whole numbers of tokens >= 1, got True"),
        ([8, "16"], "whole numbers of tokens >= 1, got '16'"),
    ],
)
def test_bad_buckets_are_named(buckets, says):
    """The engine's buckets option: a bad one is a UsageError naming it (a string raised
    TypeError from sorting, 0 and negatives were kept as buckets no text can use)."""
    with pytest.raises(UsageError, match=re.escape(says)):
        batching.buckets_for(67, buckets)
    assert batching.buckets_for(67, (np.int64(16), 8)) == (8, 16, 67)


def test_long_buckets_pad_a_long_text_by_at_most_a_quarter():
    """Past 512 tokens: four buckets an octave (by hand: 640, 768, 896, 1024, ...), so
    a 4,000-token text of an 8,192-position model pads to 4,096, not to 8,192."""
    buckets = batching.buckets_for(8192)
    assert buckets[buckets.index(512) :][:9] == (512, 640, 768, 896, 1024, 1280, 1536, 1792, 2048)
    assert min(b for b in buckets if b >= 4000) == 4096
    assert buckets[-1] == 8192 and batching.buckets_for(131072)[-1] == 131072
    for t in range(513, 131073, 97):
        assert min(b for b in batching.buckets_for(131072) if b >= t) <= 1.25 * t


@pytest.mark.parametrize("pad", [0.0, 0.25, 0.5])
@pytest.mark.parametrize("seed", range(5))
def test_plan_covers_every_example_once_within_budgets(seed, pad):
    rng = random.Random(seed)
    lengths = [rng.randint(2, 67) for _ in range(rng.randint(1, 300))]
    plan = _plan(lengths, pad_fraction=pad)
    rows = [r for b in plan for r in b.rows]
    assert sorted(rows) == list(range(len(lengths)))
    for b in plan:
        assert b.size - len(b.rows) <= pad * b.size  # dummy rows within the padding share
        assert b.size & (b.size - 1) == 0  # a power of two
        assert all(lengths[r] <= b.length for r in b.rows)
        assert b.size * b.length <= 512 or b.size == 1
        assert b.size * 10 * b.length**2 <= 10_000 or b.size == 1
        assert b.size <= 16


def test_examples_go_to_the_smallest_bucket_that_fits():
    plan = _plan([2, 8, 9, 16, 17, 67])
    where = {r: b.length for b in plan for r in b.rows}
    assert where == {0: 8, 1: 8, 2: 16, 3: 16, 4: 24, 5: 67}


@pytest.mark.parametrize(
    "pad, step, want",
    [
        (0.0, 2, [(32, 32), (2, 2), (1, 1)]),  # split, no padding (the old plan)
        (0.25, 2, [(32, 32), (4, 3)]),  # 3 -> 4: one dummy row of four
        (0.5, 2, [(32, 32), (4, 3)]),
        (0.25, 4, [(32, 32), (2, 2), (1, 1)]),  # sizes 32, 8, 2, 1: 3 -> 2 + 1
    ],
)
def test_remainders_pad_up_or_split_by_the_policy(pad, step, want):
    plan = _plan(
        [10] * 35, max_batch=32, tokens=10_000, output_bytes=10**9, pad_fraction=pad, size_step=step
    )
    assert [(b.size, len(b.rows)) for b in plan] == want


def test_split_pads_only_when_nothing_smaller_fits():
    assert batching.ladder(64, 4) == (64, 16, 4, 1)
    assert batching.split(35, [64, 16, 4], 0.0) == [(16, 16), (16, 16), (4, 3)]  # must pad
    assert batching.split(12, [16, 4, 1], 0.25) == [(16, 12)]
    assert batching.split(11, [16, 4, 1], 0.25) == [(4, 4), (4, 4), (4, 3)]


@pytest.mark.parametrize("pad", [0.0, 0.25])
def test_shape_count_is_bounded(pad):
    seen = set()
    rng = random.Random(0)
    budgets = batching.Budgets(output_bytes=10_000, tokens=512, max_batch=16, pad_fraction=pad)
    for _ in range(50):
        lengths = [rng.randint(2, 67) for _ in range(rng.randint(1, 100))]
        seen |= {(b.length, b.size) for b in _plan(lengths, pad_fraction=pad)}
    assert len(seen) <= batching.max_shapes(batching.buckets_for(67), budgets)


def test_padding_compiles_fewer_shapes_than_splitting():
    rng = random.Random(1)
    lengths = [rng.randint(5, 30) for _ in range(100)]  # sentences: a few full buckets
    split = {(b.length, b.size) for b in _plan(lengths, pad_fraction=0.0)}
    padded = {(b.length, b.size) for b in _plan(lengths, pad_fraction=0.25)}
    assert len(padded) < len(split)


def test_batch_size_is_at_least_one_even_over_budget():
    budgets = batching.Budgets(output_bytes=1, tokens=1, max_batch=8)
    assert batching.batch_size(64, lambda t: 10**12, budgets) == 1


@pytest.mark.parametrize("devices", [2, 4])
def test_data_parallel_batches_are_multiples_of_the_device_count(devices):
    rng = random.Random(devices)
    lengths = [rng.randint(2, 67) for _ in range(137)]
    plan = _plan(lengths, devices=devices, pad_fraction=0.0)
    assert sorted(r for b in plan for r in b.rows) == list(range(len(lengths)))
    for b in plan:
        assert b.size % devices == 0
        assert len(b.rows) == b.size or (len(b.rows) < devices and b.size == devices)
        assert b.size // devices <= 16  # max_batch is per device


def test_budgets_follow_the_device():
    cpu = SimpleNamespace(platform="cpu")
    assert batching.Budgets.for_devices([cpu]) == batching.Budgets()
    assert batching.Budgets.for_devices([cpu], max_batch=8, tokens=None).max_batch == 8
    gpu = SimpleNamespace(
        platform="gpu", memory_stats=lambda: {"bytes_limit": 80 << 30, "bytes_in_use": 16 << 30}
    )
    big = batching.Budgets.for_devices([gpu])
    assert big.max_batch == 512 and big.size_step == 4 and big.output_bytes == 4 << 30
    small = SimpleNamespace(platform="gpu", memory_stats=lambda: {"bytes_limit": 8 << 30})
    assert batching.Budgets.for_devices([small]).output_bytes == 1 << 30  # an eighth

    def broken():
        raise NotImplementedError("memory_stats")

    for odd in (lambda: None, broken, lambda: {"bytes_limit": 1, "bytes_in_use": 5}):
        device = SimpleNamespace(platform="tpu", memory_stats=odd)  # unknown or full
        assert batching.Budgets.for_devices([device]).output_bytes == 1 << 30
    with pytest.raises(UsageError, match="size_step must be a power of two"):
        batching.Budgets(size_step=3)
    with pytest.raises(UsageError, match="pad_fraction"):
        batching.Budgets(pad_fraction=1.0)


def _rented(lengths, ledger, **kw):
    budgets = batching.Budgets(**{**dict(output_bytes=10**9, tokens=10**6, max_batch=32), **kw})
    return batching.plan_batches(lengths, (10,), lambda t: t, budgets, ledger=ledger, key="spec")


def _ran(plan, ledger):
    """What dispatching the plan does to the ledger; the (size, real rows) it ran."""
    for b in plan:
        ledger.charge("spec", b)
        ledger.add("spec", b.length, b.size)
    return [(b.size, len(b.rows)) for b in plan]


def test_padding_is_rented_against_compiling_until_it_has_cost_one_compile():
    # 21 rows of bucket 10, sizes 32, 16, 8, 4, 2, 1: the split is 16 + 4 + 1 (pad 0.25 allows
    # no more), padding up is one batch of 32 with 11 dummy rows = 110 padded tokens a call.
    ledger = batching.ShapeLedger()
    shapes = lambda plan: [(b.size, len(b.rows)) for b in plan]  # noqa: E731
    assert shapes(_rented([7] * 21, None)) == [(16, 16), (4, 4), (1, 1)]  # no ledger: as before
    assert shapes(_rented([7] * 21, ledger)) == [(32, 21)]
    assert _rented([7] * 21, ledger)[0].rent == (16, 110)
    assert ledger.rent == {}  # planning charges nothing: a batch that runs does
    for call in range(3):  # 110, 220, 330 tokens: within one compile's 330
        assert _ran(_rented([7] * 21, ledger, compile_tokens=330), ledger) == [(32, 21)], call
    assert ledger.rent == {("spec", 10, 16): 330}
    # The fourth call would bring the rent to 440 > 330: 16 is bought; the rest, 5 -> 8,
    # rents 3 dummy rows against compiling 4 and 1.
    assert _ran(_rented([7] * 21, ledger, compile_tokens=330), ledger) == [(16, 16), (8, 5)]
    assert ledger.rent == {("spec", 10, 4): 30}  # 16 is compiled: its rent is settled
    assert shapes(_rented([7] * 21, ledger, compile_tokens=0)) == [(16, 16), (4, 4), (1, 1)]


def test_a_compiled_split_size_is_split_off_and_only_the_rest_rents():
    ledger = batching.ShapeLedger()
    ledger.add("spec", 10, 16)  # e.g. by Engine.warmup, or a batch that ran
    # 16 is compiled: split it off; the rest, 5 -> 8, rents 3 dummy rows instead of compiling 4.
    assert _ran(_rented([7] * 21, ledger), ledger) == [(16, 16), (8, 5)]
    assert ledger.rent == {("spec", 10, 4): 30}
    ledger.add("spec", 10, 4)  # compiled: its rent is settled
    assert _ran(_rented([7] * 21, ledger), ledger) == [(16, 16), (4, 4), (1, 1)]
    assert ledger.rent == {}


def test_padding_is_not_rented_where_it_compiles_as_many_shapes_as_the_split():
    ledger = batching.ShapeLedger()
    ledger.add("spec", 10, 1)
    # 17 rows: the split 16 + 1 compiles one new shape, padding up to 32 one too: split.
    assert _ran(_rented([7] * 17, ledger), ledger) == [(16, 16), (1, 1)]
    assert ledger.rent == {}


def test_compile_tokens_is_checked():
    with pytest.raises(UsageError, match="compile_tokens must be at least 0"):
        batching.Budgets(compile_tokens=-1)
    # load(compile_tokens="many") was a TypeError comparing "many" with 0
    with pytest.raises(UsageError, match="compile_tokens must be a number, got 'many'"):
        batching.Budgets(compile_tokens="many")
    with pytest.raises(UsageError, match="output_bytes must be a number, got None"):
        batching.Budgets(output_bytes=None)
    assert batching.Budgets(output_bytes=np.int64(1 << 20), tokens=1e4).tokens == 1e4
    gpu = SimpleNamespace(platform="gpu", memory_stats=lambda: {"bytes_limit": 8 << 30})
    assert batching.Budgets.for_devices([gpu]).compile_tokens > batching.Budgets().compile_tokens


def test_a_program_warmed_one_size_per_bucket_pads_into_compiled_sizes():
    ledger = batching.ShapeLedger()
    ledger.add("spec", 10, 32)  # Engine.warmup(spec, sizes="largest") does both
    ledger.pad_into.add("spec")
    # 3 rows would pad to 4 (within pad_fraction), a new shape: they pad into 32 (290 tokens)
    # until that rent passes one compile (600 tokens); then 4 is bought.
    for call in range(2):
        assert _ran(_rented([7] * 3, ledger, compile_tokens=600), ledger) == [(32, 3)], call
    assert ledger.rent == {("spec", 10, 4): 580}
    assert _ran(_rented([7] * 3, ledger, compile_tokens=600), ledger) == [(4, 3)]
    assert ledger.rent == {}
    # 37 rows: one full 32; the rest, 5, pads into the 32 planned in the same call.
    assert _ran(_rented([7] * 37, ledger), ledger) == [(32, 32), (32, 5)]
    assert ledger.rent == {("spec", 10, 1): 270}  # 4 is compiled: the tight 4 + 1 needs 1
    ledger.add("spec", 10, 1)
    assert _ran(_rented([7] * 37, ledger), ledger) == [(32, 32), (4, 4), (1, 1)]  # nothing new
    # Without pad_into (a first capture, warmup of every size): padding within pad_fraction.
    plain = batching.ShapeLedger()
    plain.add("spec", 10, 32)
    assert _ran(_rented([7] * 3, plain), plain) == [(4, 3)]


@pytest.mark.parametrize("devices", [1, 2])
@pytest.mark.parametrize("pad_into", [False, True])
def test_rented_plans_cover_every_row_once_on_the_ladder_with_rent_within_one_compile(
    devices, pad_into
):
    rng = random.Random(devices + 2 * pad_into)
    ledger = batching.ShapeLedger()
    budgets = batching.Budgets(output_bytes=10**9, tokens=4096, max_batch=32, compile_tokens=900)
    ladder = {s * devices for s in batching.ladder(32, 2)}
    if pad_into:
        ledger.pad_into.add("spec")
        for bucket in (8, 16, 24, 40):
            ledger.add("spec", bucket, 32 * devices)
    rented = 0
    for _ in range(300):
        lengths = [rng.randint(2, 40) for _ in range(rng.randint(1, 90))]
        plan = batching.plan_batches(
            lengths,
            (8, 16, 24, 40),
            lambda t: t,
            budgets,
            devices=devices,
            ledger=ledger,
            key="spec",
        )
        assert sorted(r for b in plan for r in b.rows) == list(range(len(lengths)))
        for b in plan:
            assert b.size in ladder and all(lengths[r] <= b.length for r in b.rows)
            padded = b.size - len(b.rows)
            if b.rent is None:  # unrented: within pad_fraction, or fewer rows than devices
                assert padded <= 0.25 * b.size or len(b.rows) < devices, b
            else:
                rented += 1
                assert b.rent[1] == padded * b.length  # the rent is the dummy rows' tokens
                assert not ledger.knows("spec", b.length, b.rent[0])  # avoids an uncompiled size
            ledger.charge("spec", b)
            ledger.add("spec", b.length, b.size)
        assert all(tokens <= 900 for tokens in ledger.rent.values())
    assert rented > (20 if pad_into else 0)


# An 8-head, 4-layer model's statistics-only request (head_stats: [L, H, 9] float32)
# and one layer's float32 logits per example: [H, T, T] dense, [H, 256, 256] blockwise.
HEADS, STATS_BYTES = 8, 4 * 8 * 9 * 4


def dense_logits(t):
    return HEADS * t * t * 4


def blockwise_logits(t):
    return HEADS * min(t, 256) ** 2 * 4


@pytest.mark.parametrize("length, dense, blocks", [(4096, 1, 4), (8192, 1, 2), (512, 8, 8)])
def test_the_attention_budget_sizes_dense_batches_by_t_squared_and_blockwise_ones_not(
    length, dense, blocks
):
    budgets = batching.Budgets()  # the CPU's: 512 MiB of logits, 16k tokens, 256 MiB out
    plan = lambda work: batching.plan_batches(  # noqa: E731
        [length - 3] * 8,
        (512, length),
        lambda t: STATS_BYTES,
        budgets,
        attention_bytes_per_example=work,
    )
    assert {b.size for b in plan(dense_logits)} == {dense}
    assert {b.size for b in plan(blockwise_logits)} == {blocks}
    # 8 heads x 2048^2 x 4 bytes = 128 MiB: four examples fill 512 MiB exactly
    assert batching.batch_size(2048, lambda t: 1, budgets, dense_logits) == 4
    small = batching.Budgets(attention_bytes=(512 << 20) - 1)
    assert batching.batch_size(2048, lambda t: 1, small, dense_logits) == 2
    assert batching.batch_size(2048, lambda t: 1, small) == 8  # no attention term: tokens


def test_the_output_budget_still_bounds_a_blockwise_batch():
    budgets = batching.Budgets(output_bytes=3 * STATS_BYTES)
    assert batching.batch_size(4096, lambda t: STATS_BYTES, budgets, blockwise_logits) == 2


def test_an_attention_budget_below_one_byte_is_refused_by_name():
    with pytest.raises(UsageError, match="attention_bytes budget must be at least 1, got 0"):
        batching.Budgets(attention_bytes=0)
