"""Attention flow (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers").

The attention graph of one example has a node (m, i) for every level m = 0..L
and token i: level 0 holds the input tokens, level l + 1 the output of layer l.
Node (m + 1, i) has an edge to each (m, j) of capacity A'_m[i, j], the
residual-augmented head mean of `jaxattn.analysis.rollout.residual_attention`
(0.5 mean_h W_m + 0.5 I, rows renormalised). The flow of layer l is

    F_l[i, j] = maxflow((l+1, i) -> (0, j)) / sum_k maxflow((l+1, i) -> (0, k))

the value of a maximum flow from position i after layer l (the source) to input
token j (the sink): one max-flow problem per (i, j), each row normalised to sum
1. Rollout multiplies the A' (every path counts, weighing the product of its
edges); flow lets each edge carry at most its weight over all paths together.

This is the authors' construction (samiraabnar/attention_flow,
attention_graph_util.py: ``get_adjmat`` gives the edge from (m+1, i) to (m, j)
the capacity ``mat[m][i][j]``; ``compute_flows`` and ``compute_node_flow``
take ``nx.maximum_flow_value(G, u, v)`` from each output node u to each input
node v and divide each row by its sum; ``get_flow_relevance`` builds ``mat`` as
the head mean plus I, rows renormalised). A problem here holds only the nodes
its flow can use: the source, levels l..1 and the sink. The other input tokens
have no edge out, and no other node at level l + 1 or above can be reached from
the source, so the values are the same.

Layer 0 has one edge per pair: F_0 = A'_0, rollout's R_0. Layer 1 has disjoint
two-edge paths: F_1[i, j] is proportional to sum_k min(A'_1[i, k], A'_0[k, j]).
Deeper layers run scipy's Dinic on integer capacities, A' scaled by 2^30 and
rounded: a value is off the real-valued max-flow by at most 2^-31 per edge of a
minimum cut (about 1e-9 from networkx's, which the authors call; the weights
themselves are float32). The problems of a layer are solved together,
as disjoint copies between one super source and one super sink, `MAX_EDGES`
edges per scipy call: its fixed cost per call would dominate one call per
problem.

Cost: layer l >= 2 solves T^2 problems of about (l - 1) T^2 edges each, so an
example costs O(L^2 T^4) edges, each problem O(max-flow). Use `FlowStats`'s
``max_tokens`` and ``max_examples`` to bound it (timings in ANALYSIS.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxattn.analysis.rollout import (
    RESIDUAL,
    RolloutStats,
    check_from_input,
    residual_attention,
)
from jaxattn.analysis.tokens import SpecialTokens
from jaxattn.analysis.weights import capture_weights, check_layout, normalise_rows
from jaxattn.capture import Capture, one_capture
from jaxattn.errors import UsageError

SCALE = 2**30
"""Capacities are A' * SCALE rounded to integers (scipy's max-flow takes integers)."""
MAX_EDGES = 1 << 21
"""Most edges in one scipy max-flow call (about 170 MB of work arrays at this size)."""
MAX_TOKENS = 40
"""`FlowStats` skips longer examples by default: 94% of UD EWT dev, 28% of its T^4 cost."""


def _scipy():
    try:
        from scipy.sparse import csr_array
        from scipy.sparse.csgraph import maximum_flow
    except ImportError as e:  # the rest of jaxattn.analysis needs numpy only
        raise ImportError("attention flow needs scipy's max-flow: pip install scipy") from e
    return csr_array, maximum_flow


def attention_flow(
    weights: np.ndarray, residual: float = RESIDUAL, layers: Sequence[int] | None = None
) -> np.ndarray:
    """Flow F_l of the given layers, by the module docstring.

    Args:
      weights: [L, H, T, T] row-stochastic weights of consecutive layers from
        the first (attention, or row-normalised norm-based weights).
      residual: weight of the identity term (0.5 in the paper).
      layers: indices l into the L axis whose flow is computed; None: all.

    Returns:
      [len(layers), T, T] float64; every row sums to 1.

    Raises:
      UsageError: a layer outside 0..L-1, or as `residual_attention`.
    """
    aug = residual_attention(weights, residual)
    n, t = aug.shape[0], aug.shape[-1]
    chosen = list(range(n)) if layers is None else [int(x) for x in layers]
    if any(not 0 <= x < n for x in chosen):
        raise UsageError(f"layers must lie in 0..{n - 1}; got {chosen}")
    out = np.empty((len(chosen), t, t))
    for k, layer in enumerate(chosen):
        out[k] = normalise_rows(max_flows(aug, layer))
    return out


def max_flows(aug: np.ndarray, layer: int) -> np.ndarray:
    """[T, T]: the max-flow value from (layer + 1, i) to (0, j), before normalisation.

    Args:
      aug: [L, T, T] capacities A' (`residual_attention`).
      layer: l, the layer whose output nodes are the sources.
    """
    if layer == 0:
        return aug[0].copy()
    if layer == 1:  # source -> k -> sink, one path per k
        return np.minimum(aug[1][:, :, None], aug[0][None, :, :]).sum(1)
    caps = np.rint(aug[: layer + 1] * SCALE).astype(np.int32)
    t = aug.shape[-1]
    per_problem = 2 * t + (layer - 1) * t * t + 2
    step = max(1, MAX_EDGES // per_problem)
    pairs = np.arange(t * t)
    out = np.empty(t * t)
    for start in range(0, t * t, step):
        chunk = pairs[start : start + step]
        out[chunk] = _solve_together(caps, chunk // t, chunk % t)
    return out.reshape(t, t) / SCALE


def _solve_together(caps: np.ndarray, sources: np.ndarray, sinks: np.ndarray) -> np.ndarray:
    """Max-flow values of problems (sources[k], sinks[k]) on caps [l + 1, T, T], l >= 2.

    Problem k gets its own nodes: the source, levels l..1 (T nodes each) and the
    sink. A super source feeds every source and every sink drains into a super
    sink, each through an edge that carries the source's whole out-capacity.
    The copies share no node, so a maximum flow of the whole graph is a maximum
    flow of each copy, read on the copy's edge into the super sink.
    """
    csr_array, maximum_flow = _scipy()
    top, t, p = caps.shape[0] - 1, caps.shape[-1], len(sources)
    size = 2 + top * t
    base = np.arange(p) * size
    sink = base + size - 1
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    cap: list[np.ndarray] = []

    def level(m: int) -> np.ndarray:  # [P, T]: the copies' nodes of level m
        return base[:, None] + 1 + (top - m) * t + np.arange(t)

    def edges(tail, head, capacity) -> None:
        tail, head, capacity = np.broadcast_arrays(tail, head, capacity)
        src.append(tail.ravel())
        dst.append(head.ravel())
        cap.append(capacity.ravel())

    edges(base[:, None], level(top), caps[top][sources])  # source -> level l: A'_l[i, :]
    for m in range(top - 1, 0, -1):  # level m + 1 -> level m: A'_m
        edges(level(m + 1)[:, :, None], level(m)[:, None, :], caps[m][None])
    edges(level(1), sink[:, None], caps[0][:, sinks].T)  # level 1 -> sink: A'_0[:, j]
    n = p * size
    supply = caps[top][sources].sum(-1, dtype=np.int64)  # <= 2^30 + T / 2: fits int32
    edges(np.full(p, n), base, supply)
    edges(sink, np.full(p, n + 1), supply)
    graph = csr_array(
        (np.concatenate(cap).astype(np.int32), (np.concatenate(src), np.concatenate(dst))),
        shape=(n + 2, n + 2),
    )
    graph.eliminate_zeros()
    flow = maximum_flow(graph, n, n + 1).flow
    return np.asarray(flow[sink, np.full(p, n + 1)], np.float64).ravel()


def flow(
    capture: Capture,
    kind: str = "attention",
    residual: float = RESIDUAL,
    layers: Sequence[int] | None = None,
) -> np.ndarray:
    """`attention_flow` of one capture's weights of `kind` ("attention" or "norm").

    The head mean is over the captured heads: capture all heads for the paper's
    definition.

    Raises:
      UsageError: the capture's layers are not 0, 1, ..., L-1 (flow starts at
        the input), or it lacks the quantity of `kind`.
    """
    check_from_input(capture, "flow")
    return attention_flow(capture_weights(capture, kind), residual, layers)


class FlowStats(RolloutStats):
    """`RolloutStats`'s per-layer summary, of the flow F_l instead of the rollout R_l.

    Args:
      kinds: weight kinds; those the capture holds are used. "attention" is the
        authors' flow, "norm" the same graph on norm-based weights (jaxattn's).
      specials: special-token strings; detected per example when None.
      max_tokens: skip examples longer than this (counted in ``skipped``; the
        cost grows as T^4); None: no limit.
      max_examples: consider only the first this many examples; None: all.
    """

    def __init__(
        self,
        kinds: tuple[str, ...] = ("attention", "norm"),
        specials: SpecialTokens | None = None,
        max_tokens: int | None = MAX_TOKENS,
        max_examples: int | None = None,
    ):
        super().__init__(kinds, specials)
        self.max_tokens, self.max_examples = max_tokens, max_examples
        self.seen = 0
        self.skipped = 0

    @property
    def examples(self) -> int:
        """Examples whose flow was computed."""
        return self.seen - self.skipped

    def matrices(self, capture: Capture, kind: str) -> np.ndarray:
        return flow(capture, kind)

    def update(self, capture: Capture) -> None:
        """Add one example (ignored past ``max_examples``, skipped past ``max_tokens``)."""
        if self.max_examples is not None and self.seen >= self.max_examples:
            return
        self.seen += 1
        if (
            self.max_tokens is not None
            and one_capture(capture, "an analysis's update").length > self.max_tokens
        ):
            self.layout = check_layout(self.layout, capture)
            self.skipped += 1
            return
        super().update(capture)
