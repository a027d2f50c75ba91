"""What a replica says it serves: its GetModelInfo answer as the engine's `ModelInfo`,
and the `provenance` of the captures it sends."""

from __future__ import annotations

import dataclasses

from jaxattn.capture import frozen
from jaxattn.info import ModelInfo, provenance
from jaxattn.v1 import attention_pb2 as pb

# ModelInfo fields the wire calls otherwise (attention.proto's ModelInfo).
_WIRE_NAMES = {"hidden": "hidden_size", "vocab": "vocab_size"}


def model_info_of(info: pb.ModelInfo) -> ModelInfo:
    """A GetModelInfo answer as the engine's `ModelInfo` (a field the answer lacks, from
    an older server, keeps ModelInfo's default)."""
    wire = info.DESCRIPTOR.fields_by_name
    values = {}
    for field in dataclasses.fields(ModelInfo):
        name = _WIRE_NAMES.get(field.name, field.name)
        if name in wire:
            value = getattr(info, name)
            scalar = isinstance(value, str | bytes | int | float | bool)
            values[field.name] = value if scalar else tuple(value)
    values["precision"] = info.precision or "highest"  # a jaxattn 0.1 server says nothing
    # 0 from a server that predates the field: no grouped-query attention
    values["num_key_value_heads"] = info.num_key_value_heads or info.heads
    return ModelInfo(**values)


def capture_provenance(info: ModelInfo | None, address: str):
    """Captures' `provenance`: the model of the replica that sent them (just the source
    when it would not say)."""
    if info is None:
        return frozen({"source": f"server {address}"})
    return frozen(provenance(info, {}, f"server {address}"))
