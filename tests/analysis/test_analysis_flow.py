"""Attention flow (Abnar & Zuidema 2020): hand-computed max-flows, and the authors' construction.

The reference `authors_flow` is written here from samiraabnar/attention_flow
(attention_graph_util.py get_adjmat, compute_flows; get_flow_relevance): the
whole layered graph of (L + 1) T nodes, node (level, token) at level * T +
token, an edge from (m + 1, i) to (m, j) of capacity A'_m[i, j], and for every
output node u of every level >= 1 the float max-flow value to every input node
v (networkx's Edmonds-Karp, as the authors call it), each row divided by its
sum.
"""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest
from analysis_helpers import make_capture

from jaxattn.analysis import (
    CorpusAnalysis,
    FlowStats,
    attention_flow,
    attention_rollout,
    flow,
    render_markdown,
    residual_attention,
)
from jaxattn.analysis.flow import max_flows
from jaxattn.capture import Capture
from jaxattn.errors import UsageError

FLOW_MODULE = importlib.import_module(
    "jaxattn.analysis.flow"
)  # the package's `flow` is the function

# One head per layer, 2 tokens; with the residual 0.5 A + 0.5 I:
TO_0 = [[1.0, 0.0], [1.0, 0.0]]  # A' = [[1, 0], [.5, .5]]
TO_1 = [[0.0, 1.0], [0.0, 1.0]]  # A' = [[.5, .5], [0, 1]]
SWAP = [[0.0, 1.0], [1.0, 0.0]]  # A' = [[.5, .5], [.5, .5]]
HAND = np.array([[TO_0], [TO_1], [SWAP]])  # [L=3, H=1, 2, 2]


def authors_flow(weights: np.ndarray) -> np.ndarray:
    """[L, T, T]: F_l for every layer, by the authors' construction (module docstring)."""
    nx = pytest.importorskip("networkx")
    w = np.asarray(weights, np.float64)
    mat = w.sum(1) / w.shape[1] + np.eye(w.shape[-1])  # heads summed / H, plus I
    mat = mat / mat.sum(-1, keepdims=True)
    n_layers, t = mat.shape[0], mat.shape[-1]
    graph = nx.DiGraph()
    for level in range(1, n_layers + 1):
        for i in range(t):
            for j in range(t):
                graph.add_edge(level * t + i, (level - 1) * t + j, capacity=mat[level - 1, i, j])
    out = np.zeros((n_layers, t, t))
    for layer in range(n_layers):
        for i in range(t):
            for j in range(t):
                out[layer, i, j] = nx.maximum_flow_value(
                    graph, (layer + 1) * t + i, j, flow_func=nx.algorithms.flow.edmonds_karp
                )
            out[layer, i] /= out[layer, i].sum()
    return out


def test_hand_computed_flows():
    f = attention_flow(HAND)
    # layer 0: one edge per pair, F_0 = A'_0
    np.testing.assert_allclose(f[0], [[1.0, 0.0], [0.5, 0.5]])
    # layer 1: sum_k min(A'_1[i, k], A'_0[k, j]) = [[1, .5], [.5, .5]], rows normalised
    np.testing.assert_allclose(f[1], [[2 / 3, 1 / 3], [0.5, 0.5]])
    # layer 2, from either output node (A'_2 rows are [.5, .5]): to input 0 the paths
    # s->a0->b0->0 and s->a1->b1->0 carry .5 each (1 in all); to input 1 only b1->1
    # (capacity .5) leads there: .5. Rows [1, .5] normalised. Rollout gives [.625, .375].
    np.testing.assert_allclose(f[2], [[2 / 3, 1 / 3], [2 / 3, 1 / 3]], atol=1e-9)
    np.testing.assert_allclose(attention_rollout(HAND)[2], [[0.625, 0.375], [0.625, 0.375]])


def test_a_bottleneck_caps_the_flow():
    """Two half-capacity edges meet in one node whose single edge onward carries .5:
    the flow through it is .5, not the 1 that arrives."""
    e = np.eye(3)
    a0 = np.stack([e[0], e[1], e[0]])  # A'_0: [[1, 0, 0], [0, 1, 0], [.5, 0, .5]]
    a1 = np.stack([e[2], e[2], e[2]])  # A'_1: [[.5, 0, .5], [0, .5, .5], [0, 0, 1]]
    a2 = np.stack([e[1], e[1], e[2]])  # A'_2[0] = [.5, .5, 0]
    w = np.stack([a0, a1, a2])[:, None]
    # From (3, 0): to input 0, .5 via (2, 0) -> (1, 0) and .5 via (2, 1) -> (1, 2);
    # to input 1, .5 via (2, 1) -> (1, 1); to input 2, (2, 0) and (2, 1) each send .5
    # into (1, 2), whose edge to input 2 carries .5.
    np.testing.assert_allclose(max_flows(residual_attention(w), 2)[0], [1.0, 0.5, 0.5], atol=1e-9)
    np.testing.assert_allclose(attention_flow(w)[2], authors_flow(w)[2], atol=1e-8)


@pytest.mark.parametrize(
    ("t", "layers", "heads", "seed"), [(3, 4, 2, 0), (4, 4, 3, 1), (6, 3, 2, 2)]
)
def test_authors_construction_on_random_maps(t, layers, heads, seed):
    rng = np.random.default_rng(seed)
    w = rng.dirichlet(np.full(t, 0.4), size=(layers, heads, t))
    np.testing.assert_allclose(attention_flow(w), authors_flow(w), atol=1e-8)


def test_rows_layers_and_chunks(monkeypatch):
    rng = np.random.default_rng(3)
    w = rng.dirichlet(np.full(5, 0.5), size=(4, 2, 5))
    full = attention_flow(w)
    np.testing.assert_allclose(full.sum(-1), 1.0)
    np.testing.assert_allclose(full[0], attention_rollout(w)[0])  # one edge per pair
    np.testing.assert_allclose(attention_flow(w, layers=[3, 1]), full[[3, 1]])
    monkeypatch.setattr(FLOW_MODULE, "MAX_EDGES", 10)  # one problem per scipy call
    np.testing.assert_allclose(attention_flow(w, layers=[2, 3]), full[2:], atol=1e-12)
    with pytest.raises(UsageError, match="layers must lie in 0..3"):
        attention_flow(w, layers=[4])


def test_one_token_and_identity():
    np.testing.assert_allclose(attention_flow(np.ones((4, 2, 1, 1))), np.ones((4, 1, 1)))
    np.testing.assert_allclose(
        attention_flow(np.broadcast_to(np.eye(4), (3, 2, 4, 4)))[-1], np.eye(4)
    )


def test_norm_kind_and_layers_from_the_input():
    norms = np.array([[[[2.0, 2.0], [0.0, 4.0]]], [[[3.0, 0.0], [1.0, 0.0]]], [[[1.0, 1.0]] * 2]])
    cap = make_capture(HAND, tokens=["[CLS]", "[SEP]"], sentence_b_start=None, alpha_fx_norm=norms)
    rows = norms / norms.sum(-1, keepdims=True)
    np.testing.assert_allclose(flow(cap, kind="norm"), attention_flow(rows))
    np.testing.assert_allclose(flow(cap), attention_flow(HAND))
    later = Capture(
        tokens=("[CLS]", "[SEP]"),
        sentence_b_start=None,
        layers=(1, 2),
        heads=(0,),
        dtype="float32",
        tensors={"attention": HAND[1:].astype(np.float32)},
    )
    with pytest.raises(UsageError, match="flow needs consecutive layers from 0"):
        flow(later)


def test_flow_stats_bounds():
    tokens = ["[CLS]", "[SEP]"]
    short = make_capture(HAND, tokens=tokens, sentence_b_start=None)
    five = ["[CLS]", "a", "b", "c", "[SEP]"]
    long = make_capture(np.full((3, 1, 5, 5), 0.2), tokens=five, sentence_b_start=None)
    acc = FlowStats(max_tokens=4, max_examples=3)
    for cap in (short, long, short, short):  # the fourth is past max_examples
        acc.update(cap)
    assert (acc.seen, acc.skipped, acc.examples) == (3, 1, 2)
    out = acc.result()["attention"]
    np.testing.assert_allclose(out["self"], [0.75, (2 / 3 + 0.5) / 2, (2 / 3 + 1 / 3) / 2])
    np.testing.assert_allclose(out["cls"], [0.75, (2 / 3 + 0.5) / 2, 2 / 3])
    np.testing.assert_allclose(out["sep"], 1.0 - out["cls"])


def test_report_gains_flow_only_when_asked(tmp_path):
    from jaxattn.cli import main

    tokens = ["[CLS]", "the", "cat", "[SEP]"]
    rng = np.random.default_rng(4)
    att = rng.dirichlet(np.ones(4), size=(3, 2, 4))
    cap = make_capture(att, tokens=tokens, sentence_b_start=None, alpha_fx_norm=att * 2.0)
    plain = CorpusAnalysis()
    plain.update(cap)
    assert "flow" not in plain.report()
    asked = CorpusAnalysis(flow_examples=5)
    asked.update(cap)
    report = asked.report()
    assert set(report["flow"]) == {"attention", "norm"}
    assert report["meta"]["flow_examples"] == 1 and report["meta"]["flow_skipped"] == 0
    assert "## Attention flow" in render_markdown(report)
    saved = tmp_path / "one.npz"
    cap.save(saved)
    out = tmp_path / "report.json"
    assert main(["analyze", str(saved), "--out", str(out), "--flow", "1", "--quiet"]) == 0
    written = json.loads(out.read_text())
    got, want = written["flow"]["attention"]["self"], report["flow"]["attention"]["self"]
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert "## Attention flow" in out.with_suffix(".md").read_text()


def test_stats_only_has_no_maps_for_the_flow(tmp_path, capsys):
    from jaxattn.cli import main

    text = tmp_path / "one.txt"
    text.write_text("a sentence\n")
    args = ["analyze", str(text), "--out", str(tmp_path / "r.json"), "--stats-only", "--flow", "3"]
    assert main(args) == 2
    assert "--flow needs them" in capsys.readouterr().err
