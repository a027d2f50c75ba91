"""Layer groups (`jaxattn.engine.layer_groups`, issue 31 "Outputs at this size"): the
capture step run a group of layers at a time, the hidden state handed from one group's
program to the next on the device, equals the one program (float32 rounding) for tiny
random BERT (pairs), Llama (GQA keys/values), Mistral (sliding window, blockwise) and
ModernBERT (layer 0 apart, global and local layers) and GPT-NeoX (partial rotary, parallel
residual) with odd sizes, padding, layer,
head and query/key position selections, hidden_states' L+1 entries, unrolled and
scanned; and a group's compiled program returns its own layers' outputs, not L layers'."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from tiny_models import batch, config_of, params_of

from jaxattn.capture.part import CapturePart
from jaxattn.engine import layer_groups, map_positions
from jaxattn.engine.step import CaptureStep
from jaxattn.errors import UsageError
from jaxattn.spec import CaptureSpec

T = 29
CASES = [  # family, layers, loop, attention, spec fields, group size
    (
        "bert",
        5,
        "unrolled",
        "dense",
        dict(
            what=("attention", "hidden_states", "head_stats", "alpha_fx_norm"),
            layers=(0, 2, 3, 4),
            heads=(0, 2),
        ),
        2,
    ),
    (
        "bert",
        5,
        "scan",
        "dense",
        dict(
            what=("attention", "hidden_states", "mixing_ratio"), layers=(1, 2, 3), heads=(0, 1, 2)
        ),
        2,
    ),
    (
        "llama",
        4,
        "unrolled",
        "dense",
        dict(
            what=("keys", "values", "scores", "sum_alpha_fx_norm"),
            layers=(1, 3),
            heads=(1,),
            kv_heads=(0,),
        ),
        1,
    ),
    (
        "mistral",
        3,
        "scan",
        "blockwise",
        dict(
            what=("attention", "decoder_head_stats"),
            layers=(0, 1, 2),
            heads=(2,),
            query_positions=(-5, 0, 7),
        ),
        2,
    ),
    (
        "modernbert",
        4,
        "scan",
        "dense",
        dict(
            what=("attention", "hidden_states"),
            layers=(0, 1, 2, 3),
            heads=(1,),
            key_positions=(0, -1),
        ),
        3,
    ),
    (  # partial rotary, parallel residual
        "gpt_neox",
        4,
        "unrolled",
        "dense",
        dict(what=("attention", "hidden_states", "attn_res_norm"), layers=(0, 2, 3), heads=(1, 4)),
        2,
    ),
    (
        "modernbert",
        4,
        "unrolled",
        "blockwise",
        dict(what=("attention", "head_stats"), layers=(0, 1, 2, 3), heads=(0, 2)),
        1,
    ),
]


def make_step(family, layers, loop, attention):
    config = config_of(family, num_hidden_layers=layers)
    params = params_of(config)
    step = CaptureStep(config, params, jax.devices()[:1], "device", loop, attention, block=11)
    return config, step


def inputs(config, spec):
    lengths = (T, T - 9)
    data = batch(config, lengths, pair_from=12, punct=0.2)
    return data + (map_positions.arrays(spec, lengths),)


def grouped(step, spec, arrays, size, gates=None):
    parts, x = {}, None
    for g in layer_groups.groups_of(spec, size):
        out, x = step.group(spec, g.span, x, *arrays, gates=gates)
        for name, o in out.items():
            parts.setdefault(name, []).append(np.asarray(o["data"]))
    return {name: np.concatenate(ts, axis=1) for name, ts in parts.items()}


@pytest.mark.parametrize("family, layers, loop, attention, fields, size", CASES)
def test_groups_equal_the_one_program(family, layers, loop, attention, fields, size):
    config, step = make_step(family, layers, loop, attention)
    spec = CaptureSpec(**fields)
    arrays = step.place(*inputs(config, spec))
    whole = {name: np.asarray(o["data"]) for name, o in step(spec, *arrays).items()}
    parts = grouped(step, spec, arrays, size)
    assert parts.keys() == whole.keys() == set(spec.what)
    for name in spec.what:
        assert parts[name].shape == whole[name].shape, name
        extra = 1 if name == "hidden_states" else 0
        assert parts[name].shape[1] == len(spec.layers) + extra, name
        np.testing.assert_allclose(
            parts[name], whole[name], rtol=2e-5, atol=2e-6, equal_nan=True, err_msg=name
        )


def test_scanned_alike_groups_share_one_program_with_the_same_numbers():
    """ModernBERT, 7 scanned layers (0, 3, 6 global), groups of 2 with heads ablated in
    layers 3 and 4: layers 4-5 run the program of layers 2-3, moved by 2 (each layer's
    weights, kind and gates read at its own index); layer 0's group and the last one
    (the final norm) have their own."""
    from jaxattn.engine import HeadAblation

    config = config_of("modernbert", num_hidden_layers=7, global_attn_every_n_layers=3)
    step = CaptureStep(config, params_of(config), jax.devices()[:1], "device", "scan", "dense")
    spec = CaptureSpec(what=("attention", "hidden_states"), layers=tuple(range(7)), heads=(0, 2))
    gates = HeadAblation.of([(3, 1), (4, 0)], "uniform").gates(config)
    arrays = step.place(*inputs(config, spec))
    whole = {name: np.asarray(o["data"]) for name, o in step(spec, *arrays, gates).items()}
    parts = grouped(step, spec, arrays, 2, gates)
    for name in spec.what:  # 7 layers of hidden states O(1): float32 rounding ~1e-6
        np.testing.assert_allclose(parts[name], whole[name], rtol=2e-5, atol=1e-5, err_msg=name)
    spans = {p[3] for p in step._programs if len(p) == 4}
    assert spans == {(0, 2), (2, 4), (6, 7)}  # (4, 6) ran (2, 4)'s program


def test_the_groups_of_a_spec_cover_its_layers_once():
    spec = CaptureSpec(what=("attention", "hidden_states"), layers=(1, 2, 5, 6, 9), heads=(0,))
    groups = layer_groups.groups_of(spec, 2)
    # layers between captured ones run in the later group; nothing past layer 9
    assert [g.span for g in groups] == [(0, 3), (3, 7), (7, 10)]
    assert [(g.first, g.count) for g in groups] == [(0, 2), (2, 2), (4, 1)]
    cuts = layer_groups.cuts(groups)
    assert cuts == (0, 2, 4, 5)
    # hidden_states: the embeddings entry comes with part 0 (L + 1 = 6 entries)
    part = CapturePart(fields={}, cuts=cuts, part=0, tensors={})
    assert [part.entries("hidden_states", p) for p in range(3)] == [(0, 3), (3, 5), (5, 6)]
    assert [part.entries("attention", p) for p in range(3)] == [(0, 2), (2, 4), (4, 5)]
    with pytest.raises(RuntimeError, match="at least 1, got 0"):
        layer_groups.groups_of(spec, 0)


def output_bytes(step, spec, arrays, span=None):
    if span is None:
        args = (spec, step.params, *arrays, None)
        lowered = step._jit.trace(*args).lower()
    else:
        x = None
        if span[0]:
            d = step._config.hidden_size
            x = step.place(np.zeros((arrays[0].shape[0], T, d), np.float32))[0]
        lowered = step.lower_group(spec, span, x, *arrays)
    return lowered.compile().memory_analysis().output_size_in_bytes


@pytest.mark.parametrize("loop", ["unrolled", "scan"])
def test_a_groups_program_returns_its_layers_outputs_not_all_layers(loop):
    """The compiled programs' memory analysis: one program returns L layers' maps; a
    group of 2 returns 2 layers' maps and the hidden state [B, T, D] it hands on."""
    config, step = make_step("bert", 6, loop, "dense")
    spec = CaptureSpec(what=("attention",), layers=tuple(range(6)), heads=(0, 1, 2))
    arrays = step.place(*inputs(config, spec))
    b, h, d = 2, 3, config.hidden_size
    layer = b * h * T * T * 4  # one layer's float32 maps of the batch
    assert output_bytes(step, spec, arrays) == 6 * layer
    groups = layer_groups.groups_of(spec, 2)
    # (a program of two outputs adds a table of their addresses, 16 bytes)
    for g in groups[:-1]:
        got = output_bytes(step, spec, arrays, g.span) - b * T * d * 4
        assert 2 * layer <= got <= 2 * layer + 64, g
    # the last group skips its last layer's output: its maps alone
    assert 2 * layer <= output_bytes(step, spec, arrays, groups[-1].span) <= 2 * layer + 64


def test_group_sizes_follow_the_output_budget():
    spec = CaptureSpec(what=("attention", "hidden_states"), layers=tuple(range(6)), heads=(0,))

    def bytes_of(s, length):  # one head's map and a hidden state of 4 a layer, L + 1 states
        return len(s.layers) * (length * length + 4 * length) * 4 + 4 * length * 4

    per = bytes_of(spec, 10) // 1  # the whole example: 6 layers
    one_layer = bytes_of(layer_groups.first_layers(spec, 1), 10)
    assert layer_groups.size_for(spec, 10, bytes_of, one_layer) == 1
    assert layer_groups.size_for(spec, 10, bytes_of, one_layer - 1) == 1  # never below 1
    two = bytes_of(layer_groups.first_layers(spec, 2), 10)
    assert layer_groups.size_for(spec, 10, bytes_of, two) == 2
    assert layer_groups.size_for(spec, 10, bytes_of, two + 1) == 2
    policy = layer_groups.GroupPolicy()
    assert policy.size(spec, 10, bytes_of, per) == 0  # it fits: one program
    assert policy.size(spec, 10, bytes_of, two) == 2
    assert layer_groups.GroupPolicy(0).size(spec, 10, bytes_of, two) == 0
    assert layer_groups.GroupPolicy(4).size(spec, 10, bytes_of, per) == 4
    # affine uint8 (one range over every layer) is never grouped; probabilities are
    uint8 = CaptureSpec(what=("attention", "scores"), layers=(0, 1), heads=(0,), dtype="uint8")
    assert "scores takes one range over every layer" in layer_groups.refusal(uint8)
    assert layer_groups.GroupPolicy(1).size(uint8, 10, bytes_of, 1) == 0
    probs = CaptureSpec(what=("attention",), layers=(0, 1), heads=(0,), dtype="uint8")
    assert layer_groups.refusal(probs) is None
    with pytest.raises(UsageError, match="layer_group must be None, 0 or a positive size"):
        layer_groups.GroupPolicy(-1)
