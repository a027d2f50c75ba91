"""What a model is, as reported to people and programs: `ModelInfo`, and a capture's provenance."""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jaxattn.config import ModelConfig


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelInfo:
    """What `Engine.info` and the service's GetModelInfo report.

    `dtype` is the weights' dtype; `precision` the compute precision captures
    get unless they ask for another ("highest": exact float32); `weights` a
    fingerprint of the weights ("blake2b:..."; "" when unknown), so two
    captures can tell whether the same weights made them; `quantities` the
    names this model computes (all but DeBERTa's score terms for most
    families); `shared_weights` which layers share weights, in words (ALBERT);
    `revision` the Hugging Face Hub commit hash the weights were downloaded at
    ("" for a model loaded from a local directory, which has no revision: its
    `weights` fingerprint still identifies it); `causal` whether the model is a
    decoder whose query i sees keys j <= i only (GPT-2: attention exactly 0 and
    scores exactly -inf in the future; sentence pairs refused);
    `num_key_value_heads` the key/value heads H_kv of grouped-query attention
    (Llama: query head h reads key/value head h // (heads / H_kv); `keys` and
    `values` have H_kv heads), `heads` without it (0: a ModelInfo that predates
    the field, read as `heads`); `attention_windows` each layer's causal sliding
    window W (Mistral, Qwen2, Qwen3: query i sees keys i - W < j <= i; 0 a layer
    that sees the whole past), empty when no layer slides.
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
    quantities: tuple[str, ...] = ()
    shared_weights: str = ""
    revision: str = ""
    causal: bool = False
    num_key_value_heads: int = 0
    attention_windows: tuple[int, ...] = ()

    @property
    def kv_heads(self) -> int:
        """H_kv: `num_key_value_heads`, or `heads` when that is 0 (an older ModelInfo)."""
        return self.num_key_value_heads or self.heads

    @classmethod
    def of(
        cls,
        config: ModelConfig,
        dtype: str = "float32",
        precision: str = "highest",
        weights: str = "",
        revision: str = "",
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
            quantities=config.quantities(),
            shared_weights=config.shared_weights(),
            revision=revision,
            causal=config.causal,
            num_key_value_heads=config.kv_heads,
            attention_windows=config.attention_windows(),
        )


@functools.cache
def jaxattn_version() -> str:
    """The installed jaxattn's version ("unknown" when not installed). Looked up once
    per process: the lookup reads the installed packages' metadata files (~1 ms),
    and every capture a client receives records it."""
    try:
        return importlib.metadata.version("jaxattn")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def provenance(info: ModelInfo, config: dict | None, source: str) -> dict:
    """What a capture records about where it came from (`Capture.provenance`): the
    model's name, family, whether it is causal (a decoder: the one fact of the
    config a capture through a server, whose config is {}, still needs), its
    key/value heads H_kv (`num_key_value_heads`, 0 where unknown: the other fact such a
    capture needs, to name a grouped-query head's key/value head "g of H_kv"), weights
    fingerprint, Hub revision ("" for a local directory), config, the jaxattn
    version and the source."""
    return {
        "model": info.name,
        "family": info.family,
        "causal": info.causal,
        "num_key_value_heads": info.num_key_value_heads,
        "weights": info.weights,
        "revision": info.revision,
        "config": config or {},
        "jaxattn": jaxattn_version(),
        "source": source,
    }
