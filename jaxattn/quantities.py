"""The capturable quantities: names, axes and meaning (the public contract).

Axis legend (as docs/reference/quantities.md gives it): L layers, H heads, G
key/value heads (H without grouped-query attention; Llama:
`ModelInfo.num_key_value_heads`, query head h reading key/value head h // (H / G)),
T query positions, S key positions, K head dim, D model dim, N the head statistics of
`HEAD_STATS`, P the decoder statistics of `DECODER_HEAD_STATS`, M the norm-based
mixing measures of `NORM_MEASURES`. T and S are
trimmed to an example's real length before anything is returned; a map's (`MAPS`)
are its selected query rows and key positions where a capture selects them
(`CaptureSpec.query_positions`, `key_positions`). For
``hidden_states`` the L axis holds L+1 entries: the embeddings output, then the
output of each captured layer.

This module imports neither jax nor numpy: the client and the service validate
requests with it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True, kw_only=True)
class Quantity:
    """One capturable tensor.

    Attributes:
      name: the public name (an attribute of `Capture`, a wire tensor name).
      axes: one letter per axis, from the legend above.
      probability: values lie in [0, 1], so uint8 uses the fixed scale 1/255.
      extra_layer: entries on the L axis beyond the captured layers
        (hidden_states: 1, the embeddings output before the first layer).
      uint8: whether the affine uint8 encoding serves it; False where its last
        axis holds numbers of different scales (fractions beside entropies,
        norms before and after a LayerNorm) that one range per tensor would
        serve badly.
      doc: the definition, as docs/reference/quantities.md shows it.
    """

    name: str
    axes: str
    probability: bool = False
    extra_layer: int = 0
    uint8: bool = True
    doc: str

    # The roles of the axes, read from `axes` here and nowhere else.

    def axis(self, letter: str) -> int | None:
        """The position of axis `letter` (a legend letter) in `axes`, or None without one."""
        i = self.axes.find(letter)
        return None if i < 0 else i

    @property
    def layer_axis(self) -> int | None:
        """The position of the layer axis L (its entries: the captured layers, plus
        `extra_layer` before them), or None."""
        return self.axis("L")

    @property
    def head_axis(self) -> int | None:
        """The position of the head axis, H or G (a capture's heads select along it; along G
        only where G = H: a grouped-query model's keys and values refuse a head
        selection), or None."""
        h = self.axis("H")
        return self.axis("G") if h is None else h

    @property
    def has_layer_axis(self) -> bool:
        """Whether the quantity has a layer axis L."""
        return self.layer_axis is not None

    @property
    def has_head_axis(self) -> bool:
        """Whether the quantity has a head axis H."""
        return self.head_axis is not None

    @property
    def token_axes(self) -> tuple[int, ...]:
        """The positions of the token axes T and S, padded on the device and trimmed to
        an example's real length before anything is returned."""
        return tuple(i for i, a in enumerate(self.axes) if a in "TS")


# Clark et al. 2019's per-head statistics, the N axis of head_stats (definitions:
# `jaxattn.analysis.head_stats`): attention to [CLS], to [SEP], to punctuation,
# to itself, to the previous and the next token, row entropy, [CLS]-row entropy,
# then [SEP] -> [SEP] and other -> [SEP] (the last two added later, so stored
# tables with 8 statistics keep the first eight's positions). The entropies are
# of rows smoothed as Clark et al.'s code does: (1 - s) w + s / T, s = 1e-4.
HEAD_STATS = (
    "cls",
    "sep",
    "punct",
    "self",
    "prev",
    "next",
    "entropy",
    "entropy_cls",
    "sep_sep",
    "rest_sep",
)
ENTROPY_SMOOTHING = 1e-4

# The per-head statistics that matter for a decoder, the P axis of decoder_head_stats
# (definitions: `jaxattn.analysis.decoder`): attention to the first token (the
# attention sink, Xiao et al. 2023), to the previous token, to itself, to
# punctuation, and row entropy (nats; each row smoothed as Clark et al.'s code does,
# (1 - s) w + s / (i + 1) over the i + 1 keys j <= i a causal row can see, a sliding
# window's earlier keys included at weight 0; an encoder's row over its n real keys,
# all of which it sees, as head_stats' entropy; s = ENTROPY_SMOOTHING).
# Each is a mean over query rows 1 .. n-1: a causal row 0 sees only itself, so its
# weights (1 on token 0) say nothing about the head, and it has no previous token.
# A separate list (and quantity) from HEAD_STATS, whose columns name [CLS]/[SEP].
DECODER_HEAD_STATS = ("first", "prev", "self", "punct", "entropy")

# Kobayashi et al. 2021's norm-based context-mixing measures, the M axis of the
# mixing quantities, by the paper's names. Token j's contribution vector to
# position i at a layer is
#   Attn-N:      v_ij = sum_h alpha^h_ij f_h(x_j)
#   AttnRes-N:   v_ij = sum_h alpha^h_ij f_h(x_j) + delta_ij x_j   (the residual)
#   AttnResLn-N: v_ij = gamma * centre(the AttnRes-N vector) / s_i (the LayerNorm)
# and the mixing ratio of position i is, as in the authors' paper and code,
#   ||sum_{j != i} v_ij|| / (||sum_{j != i} v_ij|| + ||v_ii||)
# (the pre-LN reading: `jaxattn.engine.norms.mixing`, docs/families.md).
NORM_MEASURES = ("Attn-N", "AttnRes-N", "AttnResLn-N")

_MIXING_DOC = (
    "over ALL heads of the layer, for each of NORM_MEASURES (Kobayashi et al. 2021: "
    "Attn-N, AttnRes-N, AttnResLn-N)"
)

QUANTITIES: dict[str, Quantity] = {
    q.name: q
    for q in (
        Quantity(
            name="attention",
            axes="LHTS",
            probability=True,
            doc="alpha^h_ij = softmax_j(q_i . k_j / sqrt(d_k) + mask)",
        ),
        Quantity(
            name="scores",
            axes="LHTS",
            doc="q_i . k_j / sqrt(d_k), before mask and softmax (ModernBERT: q and k rotated; "
            "DeBERTa: the sum of its score terms; a causal model, GPT-2: exactly -inf where "
            "j > i, the future it never sees)",
        ),
        *(
            Quantity(
                name=f"scores_{term}",
                axes="LHTS",
                doc=f"DeBERTa only: the {term} term of the scores ({what}), scaled as "
                "HF does by 1/sqrt(K * (1 + number of position terms)); the terms sum to scores",
            )
            for term, what in (
                ("c2c", "content query . content key"),
                ("c2p", "content query . relative-position key"),
                ("p2c", "relative-position query . content key"),
            )
        ),
        Quantity(name="queries", axes="LHTK", doc="per-head query projection x W_Q^h + b_Q^h"),
        Quantity(
            name="keys",
            axes="LGTK",
            doc="per-key/value-head key projection x W_K^g + b_K^g (rotary models: rotated); "
            "G = H but for grouped-query attention (Llama), where query head h reads key/value "
            "head h // (H / G)",
        ),
        Quantity(
            name="values",
            axes="LGTK",
            doc="per-key/value-head value projection x W_V^g + b_V^g (G as for keys)",
        ),
        Quantity(
            name="fx_norm",
            axes="LHT",
            doc="||f_h(x_j)||, f_h(x) = (x W_V^h + b_V^h) W_O^h (Kobayashi et al. 2020)",
        ),
        Quantity(
            name="alpha_fx_norm",
            axes="LHTS",
            doc="||alpha^h_ij f_h(x_j)|| = alpha^h_ij ||f_h(x_j)||",
        ),
        Quantity(
            name="sum_alpha_fx_norm",
            axes="LTS",
            doc="||sum_h alpha^h_ij f_h(x_j)|| over all heads of the layer",
        ),
        Quantity(
            name="attn_res_norm",
            axes="LTS",
            doc="||sum_h alpha^h_ij f_h(x_j) + delta_ij x_j||: attention plus residual "
            "(Kobayashi et al. 2021, AttnRes-N)",
        ),
        Quantity(
            name="attn_res_ln_norm",
            axes="LTS",
            doc="||gamma * centre(sum_h alpha^h_ij f_h(x_j) + delta_ij x_j)|| / s_i: through the "
            "residual and the LayerNorm with its real statistics (Kobayashi et al. 2021, "
            "AttnResLn-N)",
        ),
        Quantity(
            name="mixing_ratio",
            axes="LTM",
            probability=True,
            doc="||sum_{j != i} v_ij|| / (||sum_{j != i} v_ij|| + ||v_ii||), the share of "
            "position i's output that mixes in the other tokens, " + _MIXING_DOC,
        ),
        Quantity(
            name="mixing_norm",
            axes="LTM",
            uint8=False,
            doc="||sum_{j != i} v_ij||, the norm of what the other tokens contribute to "
            "position i, " + _MIXING_DOC,
        ),
        Quantity(
            name="preserving_norm",
            axes="LTM",
            uint8=False,
            doc="||v_ii||, the norm of position i's own contribution, " + _MIXING_DOC,
        ),
        Quantity(
            name="head_stats",
            axes="LHN",
            uint8=False,
            doc="Clark et al. 2019's statistics of each head's attention, averaged over the "
            "example's rows (HEAD_STATS order), computed on the device: no T x T map is copied",
        ),
        Quantity(
            name="norm_head_stats",
            axes="LHN",
            uint8=False,
            doc="the same statistics of the norm-based weights (alpha_fx_norm, rows normalised)",
        ),
        Quantity(
            name="decoder_head_stats",
            axes="LHP",
            uint8=False,
            doc="the decoder statistics of each head's attention (DECODER_HEAD_STATS order: "
            "first token, previous token, self, punctuation, entropy), averaged over the "
            "example's query rows 1 .. n-1, computed on the device; defined for every model "
            "(an encoder's first token is its [CLS], its entropy that of the whole row)",
        ),
        Quantity(
            name="decoder_norm_head_stats",
            axes="LHP",
            uint8=False,
            doc="the same decoder statistics of the norm-based weights (alpha_fx_norm, rows "
            "normalised)",
        ),
        Quantity(
            name="row_head_stats",
            axes="LHTN",
            uint8=False,
            doc="head_stats before the mean over rows: row i's statistics (HEAD_STATS order) of "
            "each head's attention, computed on the device (blockwise: memory linear in T). "
            "prev is 0 on row 0 and next 0 on the last row (no such key); entropy_cls is NaN "
            "on every row but a [CLS] row, sep_sep on every row but a [SEP] row, rest_sep on "
            "[SEP] rows. head_stats is "
            "the mean over the rows of each column, NaN left out (prev: the sum over rows "
            "1 .. n-1 divided by n). Always every row: a capture's query_positions select "
            "the maps' rows only",
        ),
        Quantity(
            name="norm_row_head_stats",
            axes="LHTN",
            uint8=False,
            doc="row_head_stats of the norm-based weights (alpha_fx_norm, rows normalised): "
            "norm_head_stats before the mean over rows",
        ),
        Quantity(
            name="decoder_row_head_stats",
            axes="LHTP",
            uint8=False,
            doc="decoder_head_stats before the mean over rows: row i's decoder statistics "
            "(DECODER_HEAD_STATS order; the entropy smoothed over the keys row i sees: the "
            "i + 1 keys j <= i of a causal model, an encoder's n real keys), "
            "computed on the device (blockwise: memory linear in T); NaN on row 0, which "
            "the means leave out. decoder_head_stats is the mean over rows 1 .. n-1. Always "
            "every row: a capture's query_positions select the maps' rows only",
        ),
        Quantity(
            name="decoder_norm_row_head_stats",
            axes="LHTP",
            uint8=False,
            doc="decoder_row_head_stats of the norm-based weights (alpha_fx_norm, rows "
            "normalised): decoder_norm_head_stats before the mean over rows",
        ),
        Quantity(
            name="hidden_states",
            axes="LTD",
            extra_layer=1,
            doc="embeddings output, then each captured layer's output ([L+1, T, D])",
        ),
    )
}


# DeBERTa's separately returnable score terms (their names without "scores_" are
# positions.SCORE_TERMS); every other quantity every model computes.
SCORE_QUANTITIES = tuple(name for name in QUANTITIES if name.startswith("scores_"))
COMMON = tuple(name for name in QUANTITIES if name not in SCORE_QUANTITIES)

# The quantities that are per-head statistics ([L, H, N] or [L, H, P]) rather than
# tensors over tokens.
STATISTICS = tuple(
    name
    for name, q in QUANTITIES.items()
    if (q.axis("N") is not None or q.axis("P") is not None) and q.axis("T") is None
)

# The same statistics per query row ([L, H, T, N] or [L, H, T, P]): each one's means
# over the rows are a quantity of STATISTICS. They take every row whatever a capture's
# query_positions select (those cut the maps only).
ROW_STATISTICS = tuple(
    name
    for name, q in QUANTITIES.items()
    if (q.axis("N") is not None or q.axis("P") is not None) and q.axis("T") is not None
)

# The per-token context-mixing quantities ([L, T, M]), computed together.
MIXING = tuple(name for name, q in QUANTITIES.items() if q.axis("M") is not None)

# The maps: the quantities over query rows T and key positions S together ([.., T, S]),
# the ones a selection of query and key positions (`CaptureSpec.query_positions`,
# `key_positions`) cuts to [.., R, S'].
MAPS = tuple(
    name for name, q in QUANTITIES.items() if q.axis("T") is not None and q.axis("S") is not None
)


def token_sizes(name: str, length: int, rows: int | None = None, keys: int | None = None) -> dict:
    """The sizes of the token axes T and S of one example's quantity `name` of `length`
    tokens: a map's (`MAPS`) T is `rows` and its S is `keys` where a selection of query
    and key positions gives them (None: every position); every other quantity's are
    `length`."""
    if name not in MAPS:
        return {"T": length, "S": length}
    return {"T": length if rows is None else rows, "S": length if keys is None else keys}


def shape(name: str, sizes: Mapping[str, int]) -> tuple[int, ...]:
    """The shape of one example's quantity `name`.

    Args:
      name: a key of `QUANTITIES`.
      sizes: the size of each axis letter used (L = captured layers, H, G, T, S,
        K, D; N, P and M are fixed; G defaults to H); hidden_states gets L + 1 entries
        on L.
    """
    q = QUANTITIES[name]
    sizes = {"N": len(HEAD_STATS), "P": len(DECODER_HEAD_STATS), "M": len(NORM_MEASURES), **sizes}
    if "H" in sizes:
        sizes.setdefault("G", sizes["H"])
    dims = [sizes[axis] for axis in q.axes]
    if q.has_layer_axis:
        dims[q.layer_axis] += q.extra_layer
    return tuple(dims)


def size(name: str, sizes: Mapping[str, int]) -> int:
    """Elements of one example's quantity `name` (see `shape`)."""
    return math.prod(shape(name, sizes))
