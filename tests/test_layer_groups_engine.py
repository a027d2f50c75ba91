"""Layer groups through the engine (`Engine(layer_group=...)`, issue 31): an example whose
outputs exceed the output budget runs a group of layers at a time, and every consumer of
whole Captures (capture, stream, capture_iter, .npz files) gets what the one program
gives, within float32 rounding; `capture_layers` hands each group over as it lands, in
input order. A tiny random BERT (3 layers x 3 heads, D = 15): one head's attention of
a text padded to 16 tokens is 1 kB a layer."""

from __future__ import annotations

import numpy as np
import pytest

import jaxattn
from jaxattn.capture.part import assemble
from jaxattn.engine.layer_groups import GroupPolicy
from jaxattn.errors import UsageError

TEXTS = [
    "the quick brown fox jumps over the lazy dog",
    ("the cat sat on the mat", "she was a cat and he was a dog"),
    "hello world",
]
WHAT = ("attention", "hidden_states", "head_stats")
ASK = dict(what=WHAT, layers=[0, 2], heads=[0, 2])


@pytest.fixture(scope="module")
def engine(bert_checkpoint):
    # 3,000 bytes: one layer of ASK at 16-24 tokens fits, two do not
    return jaxattn.load(bert_checkpoint, output_budget=3000, buckets=(16, 24))


def one_program(engine, **ask):
    policy = engine.pipeline.group_policy
    engine.pipeline.group_policy = GroupPolicy(0)
    try:
        return engine.capture(TEXTS, **ask)
    finally:
        engine.pipeline.group_policy = policy


def assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.tokens == w.tokens and g.layers == w.layers and g.heads == w.heads
        assert g.tensors.keys() == w.tensors.keys()
        assert g.quantization == w.quantization
        for name in w.tensors:
            assert g.tensors[name].shape == w.tensors[name].shape, name
            np.testing.assert_allclose(
                np.asarray(g.array(name), np.float32),
                np.asarray(w.array(name), np.float32),
                rtol=2e-5,
                atol=2e-6,
                err_msg=name,
            )


def test_over_the_budget_an_example_runs_in_groups_with_the_same_numbers(engine, tmp_path):
    tokenized = engine.tokenize(TEXTS)
    spec = engine.make_spec(**ASK)
    sizes = engine.pipeline.group_sizes(tokenized, spec)
    assert sizes[:2] == [1, 1], sizes  # 2 layers, 1 a group
    assert all(engine.output_bytes(spec, 16) > 3000 for _ in sizes)
    whole = one_program(engine, **ASK)
    grouped = engine.capture(TEXTS, **ASK)
    assert_same(grouped, whole)
    assert grouped[0].hidden_states.shape[0] == 3  # L + 1: the embeddings, layers 0 and 2
    assert_same(list(engine.stream(TEXTS, **ASK)), whole)
    assert_same(list(engine.capture_iter(iter(TEXTS), **ASK)), whole)
    grouped[1].save(tmp_path / "one.npz")
    assert_same([jaxattn.Capture.load(tmp_path / "one.npz")], whole[1:2])


def test_capture_layers_hands_each_group_over_in_input_order(engine):
    parts = list(engine.capture_layers(TEXTS, **ASK))
    assert [(i, p.part, p.parts) for i, p in parts] == [(i, k, 2) for i in range(3) for k in (0, 1)]
    first = parts[0][1]
    assert first.cuts == (0, 1, 2)
    assert first.tensors["attention"].shape[0] == 1  # layer 0's maps alone
    assert first.tensors["hidden_states"].shape[0] == 2  # and the embeddings output
    assert parts[1][1].tensors["hidden_states"].shape[0] == 1
    assembled = [assemble([p for i, p in parts if i == k]) for k in range(3)]
    assert_same(assembled, one_program(engine, **ASK))


def test_uint8_attention_groups_and_affine_uint8_does_not(engine):
    probs = dict(what=["attention"], layers=[0, 1, 2], heads=[1], dtype="uint8")
    parts = list(engine.capture_layers(TEXTS[:1], **probs))
    spec = engine.make_spec(**probs)
    if engine.output_bytes(spec, 16) > 3000:  # pragma: no cover - sizes as the docstring
        assert len(parts) > 1
    engine.pipeline.group_policy = GroupPolicy(1)
    try:
        assert len(list(engine.capture_layers(TEXTS[:1], **probs))) == 3
        assert_same(engine.capture(TEXTS, **probs), one_program(engine, **probs))
        scores = dict(what=["scores"], layers=[0, 1], heads=[1], dtype="uint8")
        assert len(list(engine.capture_layers(TEXTS[:1], **scores))) == 1  # one range
    finally:
        engine.pipeline.group_policy = GroupPolicy()


def test_an_unknown_layer_group_is_refused_by_name(bert_checkpoint):
    with pytest.raises(UsageError, match="layer_group must be None, 0 or a positive size"):
        jaxattn.load(bert_checkpoint, layer_group=-2)


def test_heads_ablated_in_one_group_change_the_next_groups_as_in_one_program(engine):
    from jaxattn.engine import HeadAblation

    ablation = HeadAblation.of([(1, 0), (1, 2)], "uniform")  # layer 1: in no group's captures
    ask = dict(what=["attention", "hidden_states"], layers=[0, 2], heads=[1])
    grouped = engine.capture(TEXTS, ablation=ablation, **ask)
    assert_same(grouped, one_program(engine, ablation=ablation, **ask))
    plain = engine.capture(TEXTS, **ask)
    assert not np.allclose(grouped[0].attention[1], plain[0].attention[1])  # layer 2 changed


def test_a_grouped_run_suspended_between_groups_resumes_after_other_runs(engine):
    """The server's worker runs other calls' batches while a grouped example waits for
    its reader (`service.micro_batching.MicroBatcher._advance`): the suspended run
    keeps its hidden state on the device and resumes with the one program's numbers."""
    spec = engine.make_spec(**ASK)
    tokenized = engine.tokenize(TEXTS[:1])
    run = engine.run(tokenized, spec, parts=True)
    pos, first = next(run)
    assert pos == 0 and not first.last
    between = engine.capture(TEXTS[1:], **ASK)  # other runs, grouped and not, meanwhile
    rest = [part for _, part in run]
    assert [p.part for p in [first, *rest]] == [0, 1]
    want = one_program(engine, **ASK)
    assert_same([assemble([first, *rest])], want[:1])
    assert_same(between, want[1:])


def test_two_grouped_runs_suspended_at_once_resume_in_either_order(engine):
    """The server keeps up to two grouped runs suspended between groups and resumes
    whichever one's reader takes its group first (`MicroBatcher._next_run`): here the
    first resumes and ends while the second stays suspended, then the second; each
    assembles to its one-program Capture."""
    spec = engine.make_spec(**ASK)
    runs = [engine.run(engine.tokenize(TEXTS[i : i + 1]), spec, parts=True) for i in (0, 1)]
    firsts = [next(run)[1] for run in runs]  # both suspended after their first group
    assert not any(first.last for first in firsts)
    got = [
        assemble([first, *(part for _, part in run)])
        for first, run in zip(firsts, runs, strict=True)
    ]
    assert_same(got, one_program(engine, **ASK)[:2])
