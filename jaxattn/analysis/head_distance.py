"""Distances between heads and a 2-D map of them (Clark et al. 2019, section 6).

Clark et al. measure how differently two heads attend as the Jensen-Shannon
divergence between their attention distributions, summed over the tokens of the
data, and embed the heads in 2-D with multidimensional scaling. Here:

- ``divergence[a, b]`` = mean over every query token of the corpus of
  ``JS(P_a[i], P_b[i])``, with ``JS(P, Q) = H((P + Q) / 2) - (H(P) + H(Q)) / 2``
  in nats (so in [0, ln 2]), of the rows smoothed as Clark et al.'s released
  code does (head_distances.py): ``P[i] = (1 - s) W[i] + s / T`` with
  s = `JS_SMOOTHING` = 1e-3 (``smoothing=0`` takes the rows as they are). The
  mean is their sum divided by the token count: the same up to scale.
- ``distance = sqrt(divergence)``: the root-mean-square of the per-token
  Jensen-Shannon *distances* sqrt(JS), which is a metric (the Jensen-Shannon
  distance is one, and an RMS over tokens keeps the triangle inequality). The MDS
  embedding is fitted to this distance, by classical (Torgerson) MDS. Clark et
  al.'s notebook fits scikit-learn's metric (SMACOF) MDS to the summed
  divergences themselves, which are not a metric: jaxattn's map is of the
  square root, so its layout differs from theirs (the divergences do not).

A causal model's (a capture whose provenance says so, ``HeadDistance(causal=True)``,
`jaxattn analyze` on a decoder) leaves each example's row 0 out of the sum and the
count, as the decoder statistics do: it sees only itself, so every head's row 0 is the same and its
divergence 0 whatever the model; counted, it would shrink every divergence by
one token per example. Its future keys (weight 0 in every head) change no
divergence: the smoothing gives them s / T in both rows alike.

Heads are flattened layer-major: index ``a = layer * H + head``.
"""

from __future__ import annotations

import numpy as np

from jaxattn.analysis.head_stats import row_entropy
from jaxattn.analysis.weights import capture_weights, check_layout, first_row
from jaxattn.capture import Capture
from jaxattn.errors import UsageError

JS_SMOOTHING = 1e-3
"""s in (1 - s) w + s / T, the smoothing of every row before the divergence (Clark et al.'s
released code, head_distances.py; their entropies use 1e-4, `ENTROPY_SMOOTHING`)."""


def check_smoothing(smoothing: float) -> None:
    """Raises UsageError unless 0 <= `smoothing` < 1 (s of (1 - s) w + s / T)."""
    if isinstance(smoothing, bool) or not isinstance(smoothing, (int, float)):
        raise UsageError(f"smoothing must be a number in [0, 1), not {smoothing!r}")
    if not 0 <= smoothing < 1:
        raise UsageError(f"smoothing must be in [0, 1) (s of (1 - s) w + s / T), not {smoothing}")


def js_divergence_sum(weights: np.ndarray, smoothing: float = JS_SMOOTHING) -> np.ndarray:
    """Sum over the query rows of the JS divergence between every pair of heads.

    Args:
      weights: [L, H, T, T] (or [N, T, T]; or some rows of them, [..., R, T]) row
        distributions of one example.
      smoothing: s in (1 - s) w + s / T applied to every row first (Clark et al.'s
        code: `JS_SMOOTHING`); 0 takes the rows as they are.

    Returns:
      [N, N] float64 (N = L * H), symmetric with a zero diagonal; divide by T
      for the per-token mean.
    """
    check_smoothing(smoothing)
    w = np.asarray(weights, np.float64)
    p = w.reshape(-1, *w.shape[-2:])  # [N, T, S]
    if smoothing:
        p = (1.0 - smoothing) * p + smoothing / p.shape[-1]
    n = p.shape[0]
    own = row_entropy(p).sum(-1)  # [N]: sum over rows of H(P_a[i])
    out = np.zeros((n, n))
    for a in range(n - 1):
        mix = 0.5 * (p[a][None] + p[a + 1 :])  # [N-a-1, T, S]
        js = row_entropy(mix).sum(-1) - 0.5 * (own[a] + own[a + 1 :])
        out[a, a + 1 :] = out[a + 1 :, a] = np.maximum(js, 0.0)  # rounding can dip below 0
    return out


def classical_mds(distance: np.ndarray, dims: int = 2) -> np.ndarray:
    """Classical (Torgerson) multidimensional scaling.

    ``B = -1/2 J D^2 J`` with ``J = I - 1/n``; the embedding is the top `dims`
    eigenvectors of B scaled by the square roots of their (clipped at 0)
    eigenvalues. Signs are fixed so each axis' largest-magnitude coordinate is
    positive, making the output deterministic.

    Args:
      distance: [N, N] symmetric distances.
      dims: output dimensions.

    Returns:
      [N, dims] float64 coordinates whose Euclidean distances approximate `distance`.
    """
    d = np.asarray(distance, np.float64)
    n = d.shape[0]
    j = np.eye(n) - 1.0 / n
    b = -0.5 * j @ (d**2) @ j
    values, vectors = np.linalg.eigh((b + b.T) / 2)
    order = np.argsort(values)[::-1][:dims]
    coords = np.zeros((n, dims))  # fewer points than dims: the extra axes stay 0
    coords[:, : len(order)] = vectors[:, order] * np.sqrt(np.clip(values[order], 0.0, None))
    flip = np.sign(coords[np.abs(coords).argmax(0), np.arange(coords.shape[1])])
    return coords * np.where(flip == 0, 1.0, flip)


class HeadDistance:
    """Streams the mean JS divergence between heads over a corpus (see the module docstring).

    Cost per example is O(N^2 T^2) for N = L * H heads; use ``max_tokens`` to
    cap T (longer examples are skipped and counted in ``skipped``).

    Args:
      kind: weight kind, "attention" or "norm".
      max_tokens: skip examples longer than this (None: no limit).
      smoothing: of the rows, as `js_divergence_sum` (Clark et al.'s `JS_SMOOTHING`).
      causal: the captures are a causal model's: each example's row 0 (the same in
        every head) is left out (`tokens` counts the rows summed); None: each
        capture's provenance says (`weights.first_row`).
    """

    def __init__(
        self,
        kind: str = "attention",
        max_tokens: int | None = None,
        smoothing: float = JS_SMOOTHING,
        *,
        causal: bool | None = None,
    ):
        check_smoothing(smoothing)
        self.kind = kind
        self.causal = causal
        self.max_tokens = max_tokens
        self.smoothing = smoothing
        self.layout: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        self._sum: np.ndarray | None = None
        self.tokens = 0
        self.skipped = 0

    def update(self, capture: Capture) -> None:
        """Add one example."""
        self.layout = check_layout(self.layout, capture)
        if self.max_tokens is not None and capture.length > self.max_tokens:
            self.skipped += 1
            return
        first = first_row(capture, self.causal)  # causal: row 0 sees only itself
        if capture.length <= first:
            return
        rows = capture_weights(capture, self.kind)[..., first:, :]
        s = js_divergence_sum(rows, self.smoothing)
        self._sum = s if self._sum is None else self._sum + s
        self.tokens += capture.length - first

    def result(self) -> dict[str, np.ndarray]:
        """{"divergence": [N, N], "distance": [N, N], "mds": [L, H, 2]}.

        Raises:
          UsageError: no example was added.
        """
        if self._sum is None or self.layout is None:
            past = " with a query row past its first (causal)" if self.causal else ""
            raise UsageError(f"HeadDistance saw no example{past}")
        div = self._sum / self.tokens
        dist = np.sqrt(div)
        layers, heads = self.layout
        mds = classical_mds(dist).reshape(len(layers), len(heads), 2)
        return {"divergence": div, "distance": dist, "mds": mds}
