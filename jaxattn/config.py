"""Model configuration: frozen data, with a tiny test preset beside the real one."""

from __future__ import annotations

import dataclasses
import importlib.metadata

FAMILIES = ("bert", "roberta", "distilbert")
ACTIVATIONS = ("gelu", "gelu_tanh", "relu")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """A BERT-family post-LN encoder.

    Attributes:
      family: "bert" (incl. MiniLM), "roberta" or "distilbert".
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

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"unknown family {self.family!r}: valid are {', '.join(FAMILIES)}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown activation {self.activation!r}: valid are {', '.join(ACTIVATIONS)}"
            )
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}"
            )

    @property
    def head_dim(self) -> int:
        """K, the per-head query/key/value width."""
        return self.hidden_size // self.num_heads

    @property
    def max_length(self) -> int:
        """The longest input in tokens, special tokens included."""
        return self.max_positions - self.position_offset

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - fields)
        if unknown:
            raise ValueError(f"unknown ModelConfig fields: {', '.join(unknown)}")
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelInfo:
    """What `Engine.info` and the service's GetModelInfo report.

    `dtype` is the weights' dtype; `precision` the compute precision captures
    get unless they ask for another ("highest": exact float32); `weights` a
    fingerprint of the weights ("blake2b:..."; "" when unknown), so two
    captures can tell whether the same weights made them.
    """

    name: str
    family: str
    layers: int
    heads: int
    hidden: int
    head_dim: int
    vocab: int
    max_positions: int
    dtype: str = "float32"
    precision: str = "highest"
    weights: str = ""

    @classmethod
    def of(
        cls,
        config: ModelConfig,
        dtype: str = "float32",
        precision: str = "highest",
        weights: str = "",
    ) -> ModelInfo:
        return cls(
            name=config.name,
            family=config.family,
            layers=config.num_layers,
            heads=config.num_heads,
            hidden=config.hidden_size,
            head_dim=config.head_dim,
            vocab=config.vocab_size,
            max_positions=config.max_length,
            dtype=dtype,
            precision=precision,
            weights=weights,
        )


def jaxattn_version() -> str:
    """The installed jaxattn's version ("unknown" when not installed)."""
    try:
        return importlib.metadata.version("jaxattn")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def provenance(info: ModelInfo, config: dict | None, source: str) -> dict:
    """What a capture records about where it came from (`Capture.provenance`)."""
    return {
        "model": info.name,
        "family": info.family,
        "weights": info.weights,
        "config": config or {},
        "jaxattn": jaxattn_version(),
        "source": source,
    }
