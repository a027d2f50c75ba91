"""What a replica says it serves: its GetModelInfo answer as the engine's `ModelInfo`,
and the `provenance` of the captures it sends."""

from __future__ import annotations

from jaxattn.capture import frozen
from jaxattn.info import ModelInfo, provenance
from jaxattn.v1 import attention_pb2 as pb


def model_info_of(info: pb.ModelInfo) -> ModelInfo:
    """A GetModelInfo answer as the engine's `ModelInfo`."""
    return ModelInfo(
        name=info.name,
        family=info.family,
        layers=info.layers,
        heads=info.heads,
        hidden=info.hidden_size,
        head_dim=info.head_dim,
        vocab=info.vocab_size,
        max_positions=info.max_positions,
        dtype=info.dtype,
        precision=info.precision or "highest",  # a jaxattn 0.1 server says nothing
        weights=info.weights,
        quantities=tuple(info.quantities),
        shared_weights=info.shared_weights,
        revision=info.revision,
        causal=info.causal,
        # 0 from a server that predates the field: no grouped-query attention
        num_key_value_heads=info.num_key_value_heads or info.heads,
        attention_windows=tuple(info.attention_windows),
    )


def capture_provenance(info: ModelInfo | None, address: str):
    """Captures' `provenance`: the model of the replica that sent them (just the source
    when it would not say)."""
    if info is None:
        return frozen({"source": f"server {address}"})
    return frozen(provenance(info, {}, f"server {address}"))
