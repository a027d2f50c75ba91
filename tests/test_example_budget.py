"""When an example runs in layer groups on a GPU (issue 30): past what the device memory
allows one example (an eighth of its free memory), not past the 4 GiB batch budget.

Llama-1B's full capture at 1,024 tokens is 4.2 GiB a text: under the batch budget it ran
in layer groups on an H200, each text's parts assembled on the host at page-fault speed
(1.5 s a text, 3 GB/s). Planned here on stand-in GPU devices, no GPU and no weights."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from jaxattn.config import tiny
from jaxattn.engine import batching
from jaxattn.engine.pipeline import BatchPipeline
from jaxattn.errors import UsageError
from jaxattn.spec import spec_for

GIB = 1 << 30
FULL = ("attention", "queries", "keys", "fx_norm", "alpha_fx_norm", "sum_alpha_fx_norm")
L, H, G, K, T = 16, 32, 8, 64, 1024  # Llama-3.2-1B's shape, 1,024 tokens
# One text's full capture by hand, float32: attention and alpha_fx_norm [L, H, T, T],
# queries [L, H, T, K], keys [L, G, T, K], fx_norm [L, H, T], sum_alpha_fx_norm [L, T, T].
LAYER = (2 * H * T * T + H * T * K + G * T * K + H * T + T * T) * 4
EXAMPLE = L * LAYER  # 4,531,945,472 bytes: over the 4 GiB batch budget


def _gpu(free: int):
    return SimpleNamespace(platform="gpu", memory_stats=lambda: {"bytes_limit": free})


def _pipeline(device, n_devices: int = 1, host_memory: str = "staged", **overrides):
    config = tiny(
        num_layers=L,
        num_heads=H,
        num_kv_heads=G,
        hidden_size=2048,
        head_size=K,
        max_positions=2048,
    )
    step = SimpleNamespace(host_memory=host_memory, block_for=lambda spec, length, ablated: 256)
    devices = [device] * n_devices
    budgets = batching.Budgets.for_devices(devices, **overrides)
    return BatchPipeline(
        config, step, devices, (T,), budgets, batching.ShapeLedger(), provenance=dict
    )


def _texts(n: int) -> list:
    return [SimpleNamespace(length=T)] * n


def test_an_example_under_an_eighth_of_the_free_memory_runs_as_one_program():
    pipe = _pipeline(_gpu(100 * GIB))  # an H200's share of its 141 GB, say
    spec = spec_for(pipe.config, FULL)
    assert pipe.output_bytes(spec, T) == EXAMPLE
    assert pipe.budgets.output_bytes == 4 * GIB < EXAMPLE  # the batch budget, capped
    assert pipe.budgets.example_bytes == pipe.budgets.group_bytes == 100 * GIB // 8
    assert pipe.group_sizes(_texts(4), spec) == [0, 0, 0, 0]
    plan = pipe.plan(_texts(4), spec)
    assert [(b.size, b.rows) for b in plan] == [(1, (0,)), (1, (1,)), (1, (2,)), (1, (3,))]


def test_an_example_past_an_eighth_of_the_free_memory_runs_in_groups():
    pipe = _pipeline(_gpu(16 * GIB))  # an eighth: 2 GiB
    spec = spec_for(pipe.config, FULL)
    assert pipe.budgets.group_bytes == 2 * GIB
    assert pipe.group_sizes(_texts(2), spec) == [2 * GIB // LAYER] * 2  # 7 layers a group


def test_an_output_budget_given_is_the_example_budget_too():
    """`Engine(output_budget=)` bounds one program's outputs, as before, unless an
    example budget is given as well."""
    pipe = _pipeline(_gpu(100 * GIB), output_bytes=GIB)
    spec = spec_for(pipe.config, FULL)
    assert pipe.budgets.example_bytes is None and pipe.budgets.group_bytes == GIB
    assert pipe.group_sizes(_texts(1), spec) == [GIB // LAYER]  # 3 layers a group
    both = _pipeline(_gpu(100 * GIB), output_bytes=GIB, example_bytes=8 * GIB)
    assert both.group_sizes(_texts(1), spec) == [0]


def test_the_cpu_groups_past_its_output_budget():
    budgets = batching.Budgets.for_devices([SimpleNamespace(platform="cpu")])
    assert budgets.example_bytes is None and budgets.group_bytes == budgets.output_bytes
    unknown = SimpleNamespace(platform="gpu", memory_stats=lambda: None)
    assert batching.Budgets.for_devices([unknown]).group_bytes == GIB
    for bad in (0, -1, True, "many"):
        with pytest.raises(UsageError, match="example_bytes budget must be None or at least 1"):
            batching.Budgets(example_bytes=bad)


@pytest.mark.parametrize(
    ("free_gib", "pool_gib", "devices", "example_gib"),
    [
        (100, 64, 1, 12.5),  # an H200 (at XLA's 75 %): (64 - 32) / 2 = 16 leaves free/8
        (100, 32, 1, 8),  # the pool set to 32 GiB: (32 - 16) / 2 = 8 < 12.5
        (130, 64, 1, 16),  # a 192 GB card: (64 - 32) / 2 = 16 < 16.25
        (100, 64, 2, 8),  # two devices, a lone example's batch one row each: 32 / (2 x 2)
        (100, 4, 1, 1),  # a 4 GiB pool: (4 - 2) / 2 = 1 GiB, under the 4 GiB batch budget
    ],
)
def test_the_examples_in_flight_fit_xlas_pinned_pool_beside_the_held_results(
    pinned_pool_gb, free_gib, pool_gib, devices, example_gib
):
    """Review 2026-11-28: a call that keeps its results holds up to half the pool
    (`pinned_budget`), and the pipeline's two batches of one example a device land in
    the same pool: with free/8 uncapped (16 + 2 x 12.5 > 32 GiB) the pool ran out."""
    pinned_pool_gb(pool_gib)
    pipe = _pipeline(_gpu(free_gib * GIB), n_devices=devices)
    assert pipe.budgets.example_bytes == pipe.budgets.group_bytes == int(example_gib * GIB)
    in_flight = pipe.depth * devices * pipe.budgets.group_bytes
    assert pipe.pinned_budget + in_flight <= pool_gib * GIB


def test_an_example_past_the_pools_room_runs_in_groups(pinned_pool_gb):
    pinned_pool_gb(16)  # (16 - 8) / 2 = 4 GiB < EXAMPLE
    pipe = _pipeline(_gpu(100 * GIB))
    spec = spec_for(pipe.config, FULL)
    assert pipe.group_sizes(_texts(1), spec) == [4 * GIB // LAYER]  # 15 layers a group


def test_outputs_outside_the_pool_leave_the_example_budget_as_it_was(pinned_pool_gb):
    pinned_pool_gb(4)
    pipe = _pipeline(_gpu(100 * GIB), host_memory="device")
    assert pipe.pinned_budget is None
    assert pipe.budgets.example_bytes == 100 * GIB // 8
