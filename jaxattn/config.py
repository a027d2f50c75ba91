"""Model configuration: frozen data, with a tiny test preset beside the real one.

One `ModelConfig` describes every family, encoder or decoder (`causal`), as one
shared transformer plus a few declarative switches (see `ModelConfig`); the
families' checkpoint tables live in `jaxattn.checkpoints.families`.
"""

from __future__ import annotations

import dataclasses

from jaxattn.errors import CheckpointError
from jaxattn.positions import SCORE_TERMS, Relative, Rotary, attention_span, rotated_width
from jaxattn.quantities import COMMON, QUANTITIES

# The names of the families' tables (`jaxattn.checkpoints.families.FAMILIES`), in their
# order: this numpy-only room cannot import the tables, so
# tests/checkpoints/test_model_names.py keeps the two equal (and the prose naming them).
FAMILIES = (
    "bert",
    "roberta",
    "distilbert",
    "electra",
    "albert",
    "deberta-v2",
    "modernbert",
    "gpt2",
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma2",
    "gemma3",
    "gpt_neox",
)
ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "silu")
NORMS = ("post", "pre")
# "glu": one input projection [a, g], W2 (act(a) * g) (ModernBERT's GeGLU); "gated": two,
# W2 (act(x W_gate) * (x W_up)) (Llama's SwiGLU: gate_proj, up_proj, down_proj).
FFNS = ("dense", "glu", "gated")
# "layer": LayerNorm (centred, scale and optional bias); "rms": RMSNorm (Llama:
# x / sqrt(mean(x^2) + eps) * w, no centring, no bias).
NORM_TYPES = ("layer", "rms")
# Quantities a causal (decoder) model refuses, with the reason: their statistics name
# [CLS]/[SEP]; a decoder's per-head statistics are decoder_head_stats and its twin.
DECODER_REFUSED = {
    name: "is not computed for a decoder (causal) model: its statistics assume an encoder's "
    f"[CLS]/[SEP]; ask for decoder_{name} (first token, previous token, self, punctuation, "
    "entropy)"
    for name, q in QUANTITIES.items()
    if q.axis("N") is not None  # head_stats, norm_head_stats and their row_ twins
}
# Quantities a model with post-norms (Gemma) refuses: a head's transformed vector
# reaches the residual only through the post-attention norm, whose divisor belongs to
# the query position (docs/families.md, "Gemma 2 and Gemma 3").
POST_NORM_REFUSED = {
    "fx_norm": "is not defined for a model whose attention output passes a post-attention "
    "norm (Gemma): f_h(x_j) reaches the residual divided by the query position's RMS, so "
    "it has no norm of its own; ask for alpha_fx_norm (which includes that divisor)"
}
# Quantities a model with a parallel residual (GPT-NeoX, Pythia) refuses: its attention
# block's sum h = x + attn(LN_a(x)) passes no norm (the FFN normalises x, not h, and the
# next layer's norm reads h + ffn(LN_f(x))), so the AttnResLn-N measure, which needs the
# norm applied to h, has none (docs/families.md, "gpt_neox"). The mixing quantities hold
# it as their third measure. Attn-N and AttnRes-N (sum_alpha_fx_norm, attn_res_norm) are
# the pre-LN definitions.
_PARALLEL = (
    "is not defined for a model with a parallel residual (GPT-NeoX's use_parallel_residual): "
    "no norm reads the attention block's sum x + attn(LN(x)) (the FFN's norm reads x), so "
    "the AttnResLn-N measure has no norm to decompose"
)
PARALLEL_REFUSED = {
    "attn_res_ln_norm": _PARALLEL + "; ask for attn_res_norm or sum_alpha_fx_norm",
    **{
        name: _PARALLEL + ", and it is one of this quantity's three measures; ask for "
        "attn_res_norm or sum_alpha_fx_norm"
        for name in ("mixing_ratio", "mixing_norm", "preserving_norm")
    },
}
# A causal model's scores are -inf in the future, which the affine uint8 encoding cannot hold.
DECODER_UINT8 = {
    "scores": "of a decoder (causal) model cannot be uint8: its future keys are exactly -inf, "
    "which uint8 cannot hold (ask for float32, float16 or bfloat16)"
}


def refused_quantities(config: dict, dtype: str = "float32") -> dict[str, str]:
    """`ModelConfig.refused_quantities` of a config as a dict (a ModelConfig's fields, or
    a saved capture's ``provenance["config"]``; a field it lacks: off)."""
    refused = dict(POST_NORM_REFUSED) if config.get("post_norms") else {}
    if config.get("parallel_residual"):
        refused.update(PARALLEL_REFUSED)
    if config.get("causal"):
        refused.update(DECODER_REFUSED, **(DECODER_UINT8 if dtype == "uint8" else {}))
    return refused


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """A transformer encoder: BERT's graph and the switches other families turn.

    The defaults are BERT's; a family is the few switches it changes (the
    tables in `jaxattn.checkpoints.families` say which).

    Attributes:
      family: one of FAMILIES ("bert" includes MiniLM; XLM-RoBERTa and
        CamemBERT are "roberta").
      vocab_size: rows of the word embedding.
      hidden_size: D.
      num_layers: L.
      num_heads: H; head_dim K = hidden_size // num_heads.
      intermediate_size: F, the feed-forward width.
      max_positions: rows of the position embedding.
      type_vocab_size: rows of the token-type embedding; 0 = none (DistilBERT).
      position_offset: first position id of a real token. RoBERTa numbers
        positions from padding_idx + 1 (= 2), not 0: HF's
        create_position_ids_from_input_ids.
      activation: "gelu" is the exact erf gelu (what HF's "gelu" means; note
        jax.nn.gelu defaults to the tanh approximation), "gelu_tanh", "relu".
      layer_norm_eps: epsilon of every LayerNorm.
      pad_token_id: the tokenizer's pad id (used for padding batches).
      name: a human-readable model name.
      embedding_size: E, the width of the embedding tables; 0 means D. When it
        differs from D, a projection E -> D follows the embeddings' LayerNorm
        (ELECTRA, ALBERT), or precedes it when `project_first` (DeBERTa), with a
        bias when `projection_bias`.
      absolute_positions: a learned position table is added to the word
        embeddings (False: positions enter through `relative` or `rotary`).
      norm: "post" (LN(x + f(x)), BERT) or "pre" (x + f(LN(x)), ModernBERT:
        then layer 0 has no attention LN and a final LN follows the layers).
      ffn: "dense" (W2 act(W1 x)) or "glu" (W2 (act(a) * g), [a, g] = W1 x).
      layer_groups: ALBERT's num_hidden_groups: the L layers share this many
        sets of weights (layer l uses set int(l / (L / groups))); 0 means
        every layer has its own.
      attention_bias, mlp_bias, norm_bias: whether those modules have biases.
      attention_out_bias: False: the attention output projection has no bias even
        where attention_bias gives the query/key/value projections theirs (Qwen2).
      relative: DeBERTa's relative attention, or None.
      rotary: ModernBERT's rotary positions and local windows, or None.
      head_activation: the MLM head's activation when it is not `activation`.
      embedding_norm: the embeddings end in a LayerNorm (False: GPT-2; then a
        pre-LN model's layer 0 has its own attention LayerNorm like every layer).
      num_kv_heads: H_kv, the key/value heads of grouped-query attention (Llama):
        query head h reads key/value head h // (H / H_kv); 0 means H.
      head_size: K when it is given (Llama's head_dim, which need not be D / H);
        0 means D / H.
      norm_type: "layer" (LayerNorm) or "rms" (RMSNorm, no bias: Llama), for every
        norm of the model.
      causal: a decoder's causal self-attention: query i sees keys j <= i only;
        future keys get exactly zero weight and their `scores` are exactly -inf.
        Sentence pairs and the [CLS]/[SEP] statistics (`DECODER_REFUSED`) are refused.
      tied_lm_head: a causal model's next-token head is its word embedding (GPT-2;
        Llama's tie_word_embeddings): logits = final hidden state x W_E^T. An
        untied head, where the checkpoint has one, is params["lm_head"]
        ["unembedding"] [V, D]; neither: no LM head (no causal LM loss).
      lm_softcap: the next-token logits become cap * tanh(logits / cap) (Gemma 2's
        final_logit_softcapping); 0 means none.
      qk_norm: each head's query and key pass the model's norm (`norm_type`, eps
        `layer_norm_eps`) over head_dim before RoPE, one weight [K] per layer for the
        queries and one for the keys, shared by the heads (Qwen3's q_norm/k_norm).
        The captured queries and keys are taken after it (and after RoPE); with a
        norm_offset (Gemma 3) its scale is norm_offset + w too.
      embed_scale: the word embeddings are multiplied by sqrt(D), rounded to the table's
        dtype as HF does (Gemma).
      norm_offset: an RMSNorm scales by norm_offset + w (Gemma: 1, HF's (1 + weight)).
      post_norms: the attention and FFN outputs each pass their own norm before the
        residual addition (Gemma's post_attention_layernorm, post_feedforward_layernorm):
        h = x + N_pa(attn(N_a(x))), out = h + N_pf(ffn(N_f(h))). `POST_NORM_REFUSED`.
      attn_softcap: attention logit soft-capping (Gemma 2's attn_logit_softcapping):
        the logits become cap * tanh(logits / cap) before the mask; 0 means none.
      query_scale: the logits are q.k * query_scale^-1/2 (Gemma's query_pre_attn_scalar)
        instead of q.k * K^-1/2; 0 means K.
      parallel_residual: a pre-norm layer adds the attention and the FFN to the same
        input (GPT-NeoX's use_parallel_residual): out = x + attn(N_a(x)) + ffn(N_f(x)),
        instead of h = x + attn(N_a(x)), out = h + ffn(N_f(h)). `PARALLEL_REFUSED`.

    Raises:
      CheckpointError: a field value jaxattn does not compute or that contradicts
        another (the readers of config.json and jaxattn.json add the file's name).
    """

    family: str = "bert"
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_positions: int
    type_vocab_size: int = 2
    position_offset: int = 0
    activation: str = "gelu"
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    name: str = "bert"
    embedding_size: int = 0
    projection_bias: bool = True
    project_first: bool = False
    absolute_positions: bool = True
    norm: str = "post"
    ffn: str = "dense"
    layer_groups: int = 0
    attention_bias: bool = True
    attention_out_bias: bool = True
    mlp_bias: bool = True
    norm_bias: bool = True
    relative: Relative | None = None
    rotary: Rotary | None = None
    head_activation: str = ""
    embedding_norm: bool = True
    causal: bool = False
    num_kv_heads: int = 0
    head_size: int = 0
    norm_type: str = "layer"
    tied_lm_head: bool = False
    lm_softcap: float = 0.0
    qk_norm: bool = False
    # Gemma 2/3 (see the docstring).
    embed_scale: bool = False
    norm_offset: float = 0.0
    post_norms: bool = False
    attn_softcap: float = 0.0
    query_scale: float = 0.0
    parallel_residual: bool = False

    def __post_init__(self):
        for field, kind in (("relative", Relative), ("rotary", Rotary)):
            if isinstance(getattr(self, field), dict):  # from to_dict()
                object.__setattr__(self, field, kind(**getattr(self, field)))
        for field, valid in (("norm", NORMS), ("ffn", FFNS), ("norm_type", NORM_TYPES)):
            if getattr(self, field) not in valid:
                raise CheckpointError(
                    f"unknown {field} {getattr(self, field)!r}: valid are {', '.join(valid)}"
                )
        if self.layer_groups < 0 or self.layer_groups > self.num_layers:
            raise CheckpointError(
                f"layer_groups {self.layer_groups} must lie in 0..{self.num_layers}"
            )
        if self.family not in FAMILIES:
            raise CheckpointError(
                f"unknown family {self.family!r}: valid are {', '.join(FAMILIES)}"
            )
        if self.activation not in ACTIVATIONS:
            raise CheckpointError(
                f"unknown activation {self.activation!r}: valid are {', '.join(ACTIVATIONS)}"
            )
        if self.num_heads <= 0:  # before the divisions below (a jaxattn.json may say 0)
            raise CheckpointError(f"num_heads {self.num_heads} must be positive")
        if not self.head_size and self.hidden_size % self.num_heads:
            raise CheckpointError(
                f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}"
            )
        if self.norm_offset and self.norm_type != "rms":
            raise CheckpointError("norm_offset is an RMSNorm's (1 + w): it needs norm_type 'rms'")
        if self.attn_softcap < 0 or self.query_scale < 0:
            raise CheckpointError("attn_softcap and query_scale must not be negative")
        if self.head_size < 0 or self.num_kv_heads < 0:
            raise CheckpointError("head_size and num_kv_heads must not be negative")
        if self.parallel_residual and (self.norm != "pre" or self.post_norms):
            raise CheckpointError(
                "parallel_residual needs pre-norm layers (norm 'pre') without post_norms"
            )
        if self.rotary is not None and self.rotary.partial != 1:  # GPT-NeoX's rotary_pct
            dims = self.rotary.dims(self.head_dim)
            if dims < 1 or rotated_width(dims) > self.head_dim:
                raise CheckpointError(
                    f"RoPE's fraction {self.rotary.partial} (partial_rotary_factor, GPT-NeoX's "
                    f"rotary_pct) of head_dim {self.head_dim} gives {dims} rotary dims, which "
                    f"turn {rotated_width(dims)}: it must be at least 1 dim, and turn at most "
                    f"the head's {self.head_dim} (RoPE turns pairs: 2 ceil(dims / 2))"
                )
        if self.num_heads % self.kv_heads:
            raise CheckpointError(
                f"num_heads {self.num_heads} is not divisible by num_kv_heads {self.kv_heads}: "
                "each key/value head serves an equal group of query heads"
            )

    @property
    def head_dim(self) -> int:
        """K, the per-head query/key/value width (head_size, or D / H)."""
        return self.head_size or self.hidden_size // self.num_heads

    @property
    def kv_heads(self) -> int:
        """H_kv, the key/value heads (H without grouped-query attention)."""
        return self.num_kv_heads or self.num_heads

    @property
    def group_size(self) -> int:
        """Query heads per key/value head, H / H_kv (1 without grouped-query attention)."""
        return self.num_heads // self.kv_heads

    @property
    def attention_width(self) -> int:
        """H K, the width of the query projection and of the output projection's input."""
        return self.num_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """H_kv K, the width of the key and value projections."""
        return self.kv_heads * self.head_dim

    @property
    def bare_first_layer(self) -> bool:
        """Layer 0 has no attention LayerNorm: a pre-LN model whose embeddings end in one
        (ModernBERT; HF's Identity). Its params differ from the other layers'."""
        return self.norm == "pre" and self.embedding_norm

    def has_attention_ln(self, layer: int) -> bool:
        """Whether layer `layer` normalises its input before attention (pre-LN) or after
        the attention block's addition (post-LN): every layer but a bare first one."""
        return not (self.bare_first_layer and layer == 0)

    @property
    def embedding_width(self) -> int:
        """E, the embedding tables' width (D unless factorised)."""
        return self.embedding_size or self.hidden_size

    @property
    def relative_rows(self) -> int:
        """Rows of DeBERTa's relative embedding table, 2 x HF's pos_ebd_size (0 without)."""
        if self.relative is None:
            return 0
        r = self.relative
        return 2 * attention_span(r.max_relative, r.buckets, self.max_positions)[1]

    @property
    def qkv_width(self) -> int:
        """Rows of a fused query/key/value projection (ModernBERT's Wqkv): 3 D."""
        return 3 * self.hidden_size

    @property
    def ffn_width(self) -> int:
        """Outputs of the FFN's input projection: 2 F for a GLU (input and gate), else F."""
        return 2 * self.intermediate_size if self.ffn == "glu" else self.intermediate_size

    @property
    def weight_layers(self) -> int:
        """How many layers' worth of weights the model holds (ALBERT: its groups)."""
        return self.layer_groups or self.num_layers

    def weights_of_layer(self, layer: int) -> int:
        """The weight set layer `layer` runs with (HF AlbertTransformer's group index)."""
        if not self.layer_groups:
            return layer
        return int(layer / (self.num_layers / self.layer_groups))

    def shared_weights(self) -> str:
        """Which layers share weights, in words ("" when none do)."""
        if not self.layer_groups:
            return ""
        groups: dict[int, list[int]] = {}
        for layer in range(self.num_layers):
            groups.setdefault(self.weights_of_layer(layer), []).append(layer)
        parts = [
            f"layers {ls[0]}-{ls[-1]} share weight set {g}"
            if len(ls) > 1
            else f"layer {ls[0]} has weight set {g}"
            for g, ls in groups.items()
        ]
        return "; ".join(parts) + " (attention, FFN and their LayerNorms; ALBERT)"

    def score_terms(self) -> tuple[str, ...]:
        """The separately returnable score terms (DeBERTa: c2c and its position terms)."""
        if self.relative is None:
            return ()
        return (SCORE_TERMS[0], *self.relative.att_types)

    def quantities(self) -> tuple[str, ...]:
        """The quantity names this model can capture (score terms only where it has them;
        a causal model not those of `refused_quantities`)."""
        terms = {f"scores_{t}" for t in self.score_terms()}
        refused = self.refused_quantities()
        return tuple(n for n in QUANTITIES if (n in COMMON or n in terms) and n not in refused)

    def refused_quantities(self, dtype: str = "float32") -> dict[str, str]:
        """Quantity name -> why this model refuses it in `dtype`, as the rest of a sentence
        that begins with the name (a causal model: `DECODER_REFUSED`, and as uint8
        `DECODER_UINT8`; post-norms: `POST_NORM_REFUSED`; a parallel residual:
        `PARALLEL_REFUSED`)."""
        switches = ("post_norms", "parallel_residual", "causal")
        return refused_quantities({name: getattr(self, name) for name in switches}, dtype)

    def attention_windows(self) -> tuple[int, ...]:
        """A decoder's causal sliding window W of each layer (`Rotary.local_window` in
        its local layers; 0: a global layer, the whole past), or () when no layer
        slides or the model is an encoder (`ModelInfo.attention_windows`)."""
        r = self.rotary
        if not self.causal or r is None or not r.local_window:
            return ()
        windows = tuple(
            0 if r.is_global(layer) else r.local_window for layer in range(self.num_layers)
        )
        return windows if any(windows) else ()

    @property
    def max_length(self) -> int:
        """The longest input in tokens, special tokens included."""
        return self.max_positions - self.position_offset

    def to_dict(self) -> dict:
        """The config as a plain dict of its fields (a capture's provenance["config"];
        `from_dict` reads it back)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        """The config of a `to_dict` dict (CheckpointError naming unknown fields)."""
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - fields)
        if unknown:
            raise CheckpointError(f"unknown ModelConfig fields: {', '.join(unknown)}")
        return cls(**d)


def minilm_l6() -> ModelConfig:
    """all-MiniLM-L6-v2, the embedded default (6 layers x 12 heads, D=384)."""
    return ModelConfig(
        vocab_size=30522,
        hidden_size=384,
        num_layers=6,
        num_heads=12,
        intermediate_size=1536,
        max_positions=512,
        name="all-MiniLM-L6-v2",
    )


def tiny(**overrides) -> ModelConfig:
    """A tiny config with odd sizes for tests (3 layers, 3 heads of width 5)."""
    base = dict(
        vocab_size=101,
        hidden_size=15,
        num_layers=3,
        num_heads=3,
        intermediate_size=37,
        max_positions=67,
        name="tiny",
    )
    return ModelConfig(**{**base, **overrides})
