"""The attention's position schemes: DeBERTa's relative positions, rotary positions and
local (windowed) attention, as frozen data a `ModelConfig` holds (numpy-only contract).

`Relative` is DeBERTa's disentangled attention (its position score terms and
bucketing); `Rotary` is RoPE (ModernBERT, Llama and its relatives, Gemma) with
the frequency scalings, and which layers attend locally within a window.
The engine computes them: `jaxattn.engine.relative`, `jaxattn.engine.rotary`.
"""

from __future__ import annotations

import dataclasses

from jaxattn.errors import CheckpointError
from jaxattn.quantities import SCORE_QUANTITIES

# RoPE frequency scalings (HF rope_type): "default" none, "linear" every frequency / factor,
# "llama3" HF's _compute_llama3_parameters (low frequencies / factor, high ones kept,
# the band between interpolated).
ROPE_SCALINGS = ("default", "linear", "llama3")
# DeBERTa's score terms, named as the quantities table names them (scores_c2c, ...):
# content-to-content first, then the position terms a model may add.
SCORE_TERMS = tuple(name.removeprefix("scores_") for name in SCORE_QUANTITIES)
POSITION_TERMS = SCORE_TERMS[1:]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Relative:
    """DeBERTa's disentangled relative-position attention (He et al. 2021).

    Attributes:
      att_types: the position score terms added to content-to-content:
        "c2p" (content query to position key), "p2c" (position query to
        content key), HF's pos_att_type.
      buckets: HF position_buckets: relative distances are log-bucketed into
        this many (0 or less: no bucketing).
      max_relative: HF max_relative_positions (below 1: max_positions).
      share_att_key: the position projections reuse the content query/key
        projections (DeBERTa-v2/v3) instead of their own.
      norm_rel_ebd: the relative embedding table passes a LayerNorm.
    """

    att_types: tuple[str, ...] = ("c2p", "p2c")
    buckets: int = 0
    max_relative: int = -1
    share_att_key: bool = False
    norm_rel_ebd: bool = False

    def __post_init__(self):
        object.__setattr__(self, "att_types", tuple(self.att_types))
        bad = [t for t in self.att_types if t not in POSITION_TERMS]
        if bad:
            raise CheckpointError(f"unknown att_types {bad}: valid are {', '.join(POSITION_TERMS)}")


def attention_span(
    max_relative_positions: int, position_buckets: int, max_position_embeddings: int
) -> tuple[int, int]:
    """HF DeBERTa-v2's (max_relative, span): the bucketing range and half the table.

    max_relative = max_relative_positions, or max_position_embeddings when it
    is below 1; span (HF's pos_ebd_size, att_span) = position_buckets when it
    is above 0, else max_relative. The relative table (encoder.rel_embeddings)
    has 2 * span rows, and attention uses all of them.
    """
    max_relative = max_relative_positions
    if max_relative < 1:
        max_relative = max_position_embeddings
    span = position_buckets if position_buckets > 0 else max_relative
    return max_relative, span


def rotated_width(dims: int) -> int:
    """How many of a head's dimensions a rotation of `dims` (`Rotary.dims`) turns:
    2 ceil(dims / 2), HF's cos/sin width (twice its ceil(dims / 2) frequencies)."""
    return 2 * ((dims + 1) // 2)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Rotary:
    """ModernBERT's rotary positions and alternating global/local attention.

    Attributes:
      global_theta: RoPE base of global layers.
      local_theta: RoPE base of local (sliding-window) layers.
      global_every: layer l is global when l % global_every == 0 (unless `layer_global`).
      local_window: an encoder's (ModernBERT, HF local_attention): a local layer's
        query i sees keys j with |i - j| <= local_window // 2; a causal model's (Gemma,
        HF sliding_window): keys j with 0 <= i - j < local_window. Other pairs get
        exactly zero weight.
      scaling: the frequency scaling of every layer (`ROPE_SCALINGS`; Llama's
        rope_type), with its factor and, for "llama3", low_freq_factor,
        high_freq_factor and original_max_positions (HF
        original_max_position_embeddings).
      layer_global: when given, layer l is global iff layer_global[l] (HF layer_types
        "full_attention"; Gemma's), in place of the global_every rule.
      local_scaling: local layers use `scaling` too (False: Gemma 3, whose sliding
        layers have plain RoPE and only the full-attention layers the scaling).
      partial: HF's partial_rotary_factor (GPT-NeoX's rotary_pct): RoPE's frequencies are
        those of dims = int(K * partial) dimensions, and the first 2 ceil(dims / 2) of
        each head's K dimensions are rotated (HF: cos/sin are as wide as twice the
        frequencies, so an odd dims rotates one more), the rest pass unrotated; 1: all.
    """

    global_theta: float = 10000.0
    local_theta: float = 10000.0
    global_every: int = 1
    local_window: int = 0
    scaling: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_positions: int = 0
    layer_global: tuple[bool, ...] = ()
    local_scaling: bool = True
    partial: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "layer_global", tuple(bool(g) for g in self.layer_global))
        if not 0 < self.partial <= 1:
            raise CheckpointError(
                f"rotary fraction (partial_rotary_factor) {self.partial} must lie in (0, 1]"
            )
        if self.scaling not in ROPE_SCALINGS:
            raise CheckpointError(
                f"unknown rope scaling {self.scaling!r}: valid are {', '.join(ROPE_SCALINGS)}"
            )

    def dims(self, head_dim: int) -> int:
        """HF's rotary_ndims, int(head_dim * partial): the dimensions RoPE's frequencies
        are computed for (`jaxattn.engine.rotary.inverse_frequencies`)."""
        return int(head_dim * self.partial)

    def is_global(self, layer: int) -> bool:
        """Whether layer `layer` attends globally (`layer_global`, else the global_every rule)."""
        if self.layer_global:
            return self.layer_global[layer]
        if self.global_every < 1:
            raise CheckpointError(
                f"global_attn_every_n_layers {self.global_every} must be at least 1"
            )
        return layer % self.global_every == 0

    def frequency_scaling(self, is_global: bool = True) -> tuple:
        """The scaling as a hashable tuple for `jaxattn.engine.rotary.rope_angles` (of a
        global or a local layer)."""
        if self.scaling == "default" or not (is_global or self.local_scaling):
            return ()
        return (
            self.scaling,
            float(self.factor),
            float(self.low_freq_factor),
            float(self.high_freq_factor),
            int(self.original_max_positions),
        )
