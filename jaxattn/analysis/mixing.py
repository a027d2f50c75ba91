"""Context-mixing ratios (Kobayashi et al. 2021).

Kobayashi, Kuribayashi, Yokoi and Inui 2021, "Incorporating Residual and
Normalization Layers into Analysis of Masked Language Models": how much of
position i's output at a layer's attention block comes from the *other* tokens.
For a non-negative contribution matrix W [T, S] of a layer,

    r_i = sum_{j != i} W_ij / sum_j W_ij,

and a layer's mixing ratio is the mean of r_i over every token of the corpus
(special tokens included). The five measures differ in W:

| measure | W_ij |
|---|---|
| Attn-W | mean over heads of alpha^h_ij |
| Attn-N | ||sum_h alpha^h_ij f_h(x_j)|| (`sum_alpha_fx_norm`) |
| AttnRes-W | 0.5 mean_h alpha^h_ij + 0.5 delta_ij (residual as identity; Abnar & Zuidema) |
| AttnRes-N | ||sum_h alpha^h_ij f_h(x_j) + delta_ij x_j|| (`attn_res_norm`) |
| AttnResLn-N | the same through the LayerNorm with its real statistics (`attn_res_ln_norm`) |

The paper reports, for BERT-base averaged over layers, Attn-W 96.4% and
AttnResLn-N 18.75%: counting the residual and the LayerNorm, most of a token's
representation is its own.
"""

from __future__ import annotations

import numpy as np

from jaxattn.capture import Capture

MEASURES = ("Attn-W", "Attn-N", "AttnRes-W", "AttnRes-N", "AttnResLn-N")
# measure -> the capture quantity it needs
NEEDS = {
    "Attn-W": "attention",
    "Attn-N": "sum_alpha_fx_norm",
    "AttnRes-W": "attention",
    "AttnRes-N": "attn_res_norm",
    "AttnResLn-N": "attn_res_ln_norm",
}
MIXING_QUANTITIES = tuple(dict.fromkeys(NEEDS.values()))
QUANTITIES = MIXING_QUANTITIES  # the 0.1 name, importable until 0.3


def mixing_ratio_rows(weights: np.ndarray) -> np.ndarray:
    """r_i = sum_{j != i} W_ij / sum_j W_ij for [..., T, T] weights -> [..., T]."""
    w = np.asarray(weights, np.float64)
    total = w.sum(-1)
    own = np.diagonal(w, axis1=-2, axis2=-1)
    return np.divide(total - own, total, out=np.zeros_like(total), where=total > 0)


def contribution_weights(capture: Capture, measure: str) -> np.ndarray:
    """The [L, T, T] matrix W of `measure` (see the module table).

    Raises:
      ValueError: an unknown measure, or a capture without the quantity it needs.
    """
    if measure not in NEEDS:
        raise ValueError(f"unknown mixing measure {measure!r}: valid are {', '.join(MEASURES)}")
    need = NEEDS[measure]
    if need not in capture.what:
        raise ValueError(f"{measure} needs {need!r} in the capture (what=...)")
    if measure in ("Attn-W", "AttnRes-W"):
        w = np.asarray(capture.attention, np.float64).mean(1)
        if measure == "AttnRes-W":
            w = 0.5 * w + 0.5 * np.eye(w.shape[-1])
        return w
    return np.asarray(capture.array(need), np.float64)


class MixingRatios:
    """Per-layer mixing ratios over a corpus, for every measure the captures allow."""

    def __init__(self, measures: tuple[str, ...] = MEASURES):
        self.measures = measures
        self.layers: tuple[int, ...] | None = None
        self._sums: dict[str, np.ndarray] = {}
        self.tokens = 0

    def update(self, capture: Capture) -> None:
        """Add one example (measures whose quantity it lacks are skipped)."""
        if self.layers is None:
            self.layers = tuple(capture.layers)
        elif tuple(capture.layers) != self.layers:
            raise ValueError(f"layers {capture.layers} differ from earlier {self.layers}")
        for m in self.measures:
            if NEEDS[m] in capture.what:
                rows = mixing_ratio_rows(contribution_weights(capture, m))  # [L, T]
                self._sums[m] = self._sums.get(m, 0) + rows.sum(-1)
        self.tokens += capture.length

    def result(self) -> dict[str, list[float]]:
        """{measure: [L] mean ratio over every token seen}."""
        return {m: (s / self.tokens).tolist() for m, s in self._sums.items() if self.tokens}
