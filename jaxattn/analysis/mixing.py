"""Context-mixing ratios (Kobayashi et al. 2021), as the authors define them.

Kobayashi, Kuribayashi, Yokoi and Inui 2021, "Incorporating Residual and
Normalization Layers into Analysis of Masked Language Models": how much of
position i's output at a layer's attention block comes from the *other*
tokens. With v_ij token j's contribution to position i,

    r_i = ||sum_{j != i} v_ij|| / (||sum_{j != i} v_ij|| + ||v_ii||),

and a layer's mixing ratio is the mean of r_i over every token of the corpus
(special tokens included, as the authors' ``mixing_ratio_stats_bert.py``). A
causal model's (a capture whose provenance says so, ``MixingRatios(causal=True)``,
`jaxattn analyze` on a decoder) leaves each example's row 0 out, as the decoder
statistics do: under causal attention token 0 sees only itself, so r_0 = 0 for
every measure whatever the model, and counting it would pull a layer's mean
towards 0 by one token per example (a tenth on texts of 10 tokens).
The five measures differ in v_ij:

| measure | v_ij | from |
|---|---|---|
| Attn-W | mean over heads of alpha^h_ij (a scalar) | `attention` |
| AttnRes-W | 0.5 mean_h alpha^h_ij + 0.5 delta_ij (residual as identity) | `attention` |
| Attn-N | sum_h alpha^h_ij f_h(x_j) | `mixing_ratio` |
| AttnRes-N | the same + delta_ij x_j | `mixing_ratio` |
| AttnResLn-N | that vector through the LayerNorm, with its real statistics | `mixing_ratio` |

For the weights (scalars >= 0) the norm of a sum is the sum, so r_i is the
off-diagonal share of row i (`mixing_ratio_rows`). For the vectors it is not:
r_i needs the norm of the summed contributions, which the per-pair norms
(`sum_alpha_fx_norm`, `attn_res_norm`, `attn_res_ln_norm`) cannot give. The
engine computes it on the device (`mixing_ratio`, with `mixing_norm` and
`preserving_norm`, [L, T, M] over `jaxattn.quantities.NORM_MEASURES`;
`jaxattn.engine.norms.mixing`). Before jaxattn 0.3 this module divided sums of
per-pair norms instead, which overstated every norm measure (MiniLM's
AttnResLn-N by up to 21 points); that ratio is not Kobayashi et al.'s.

The paper reports, for BERT-base averaged over layers, Attn-W 96.4% and
AttnResLn-N 18.75% (on masked inputs: the authors replace 12% of the word
pieces by [MASK]; jaxattn reads the text as given).
"""

from __future__ import annotations

import numpy as np

from jaxattn.analysis.weights import first_row
from jaxattn.capture import Capture, one_capture
from jaxattn.errors import UsageError
from jaxattn.quantities import NORM_MEASURES

WEIGHT_MEASURES = ("Attn-W", "AttnRes-W")
MEASURES = ("Attn-W", "Attn-N", "AttnRes-W", "AttnRes-N", "AttnResLn-N")
# measure -> the capture quantity it needs
NEEDS = {
    **{m: "attention" for m in WEIGHT_MEASURES},
    **{m: "mixing_ratio" for m in NORM_MEASURES},
}
# the quantities the five measures need, together (not `jaxattn.quantities.MIXING`)
MIXING_NEEDS = tuple(dict.fromkeys(NEEDS[m] for m in MEASURES))
RESIDUAL = 0.5  # AttnRes-W: the weight of the identity (Abnar & Zuidema's residual)


def mixing_ratio_rows(weights: np.ndarray) -> np.ndarray:
    """r_i = sum_{j != i} W_ij / sum_j W_ij of non-negative scalar weights [..., T, T] -> [..., T].

    Kobayashi et al.'s ratio for the weight measures (Attn-W, AttnRes-W), where
    the norm of a sum of non-negative scalars is their sum. Not the norm
    measures' ratio: a matrix of per-pair vector norms gives a different number.
    """
    w = np.asarray(weights, np.float64)
    total = w.sum(-1)
    own = np.diagonal(w, axis1=-2, axis2=-1)
    return np.divide(total - own, total, out=np.zeros_like(total), where=total > 0)


def token_ratios(capture: Capture, measure: str) -> np.ndarray:
    """r_i of `measure` for every captured layer and token: [L, T] float64.

    Raises:
      UsageError: an unknown measure, or a capture without the quantity it needs
        (named, with the ``--what`` that provides it).
    """
    if measure not in NEEDS:
        raise UsageError(f"unknown mixing measure {measure!r}: valid are {', '.join(MEASURES)}")
    need = NEEDS[measure]
    if need not in capture.what:
        raise UsageError(f"{measure} needs {need!r} in the capture (what=..., --what {need})")
    if measure in NORM_MEASURES:
        ratios = np.asarray(capture.array(need), np.float64)  # [L, T, M]
        return ratios[..., NORM_MEASURES.index(measure)]
    w = np.asarray(capture.attention, np.float64).mean(1)  # [L, T, T]
    if measure == "AttnRes-W":
        w = (1.0 - RESIDUAL) * w + RESIDUAL * np.eye(w.shape[-1])
    return mixing_ratio_rows(w)


class MixingRatios:
    """Per-layer mixing ratios over a corpus, for every measure the captures allow.

    Args:
      measures: the measures to average (`MEASURES`).
      causal: the captures are a causal model's: each example's row 0, whose ratio
        is 0 by construction (it sees only itself), is left out of the means
        (`tokens` counts the rows averaged); None: each capture's provenance says
        (`weights.first_row`).
    """

    def __init__(self, measures: tuple[str, ...] = MEASURES, *, causal: bool | None = None):
        self.measures = measures
        self.causal = causal
        self.layers: tuple[int, ...] | None = None
        self._sums: dict[str, np.ndarray] = {}
        self.tokens = 0

    def update(self, capture: Capture) -> None:
        """Add one example (measures whose quantity it lacks are skipped)."""
        one_capture(capture, "an analysis's update")
        if self.layers is None:
            self.layers = tuple(capture.layers)
        elif tuple(capture.layers) != self.layers:
            raise UsageError(f"layers {capture.layers} differ from earlier {self.layers}")
        first = first_row(capture, self.causal)  # causal: row 0 sees only itself
        for m in self.measures:
            if NEEDS[m] in capture.what:
                rows = token_ratios(capture, m)[..., first:]  # [L, T] (causal: rows 1 ..)
                self._sums[m] = self._sums.get(m, 0) + rows.sum(-1)
        self.tokens += capture.length - first

    def result(self) -> dict[str, list[float]]:
        """{measure: [L] mean ratio over every token seen (causal: but each row 0)}."""
        return {m: (s / self.tokens).tolist() for m, s in self._sums.items() if self.tokens}
