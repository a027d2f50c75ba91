"""The host side of a batch: tokens -> padded arrays before the step, arrays -> Captures after.

`pack` lays a batch's examples into [B, T] numpy arrays (ids, token types,
mask); `unpack` cuts the step's host copy into one trimmed `Capture` per real
row (padding rows and padded positions are dropped).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from jaxattn.capture import Capture
from jaxattn.config import ModelConfig
from jaxattn.dtypes import PROBABILITY_SCALE
from jaxattn.engine.batching import Batch
from jaxattn.engine.tokenize import TokenizedText
from jaxattn.quantities import QUANTITIES
from jaxattn.spec import CaptureSpec


def pack(
    batch: Batch, tokenized: Sequence[TokenizedText], config: ModelConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, type_ids, mask), each [batch.size, batch.length], of the batch's rows."""
    ids = np.full((batch.size, batch.length), config.pad_token_id, np.int32)
    type_ids = np.zeros((batch.size, batch.length), np.int32)
    mask = np.zeros((batch.size, batch.length), bool)
    for r, pos in enumerate(batch.rows):
        e = tokenized[pos]
        ids[r, : e.length] = e.ids
        if config.type_vocab_size:
            type_ids[r, : e.length] = e.type_ids
        mask[r, : e.length] = True
    # Dummy rows padding a data-parallel remainder: one real key, so their
    # softmax stays finite; their outputs are never read.
    mask[len(batch.rows) :, 0] = True
    return ids, type_ids, mask


def unpack(
    batch: Batch, host: dict, tokenized: Sequence[TokenizedText], spec: CaptureSpec
) -> Iterator[tuple[int, Capture]]:
    """(input position, Capture) of each real row of a batch's host copy.

    Args:
      batch: the batch the step ran.
      host: the step's output on the host, {name: {"data": [B, ...], "scale", "offset"}}.
      tokenized: the examples `batch.rows` index into.
      spec: the spec the step ran.
    """
    for r, pos in enumerate(batch.rows):
        e = tokenized[pos]
        tensors, quant = {}, {}
        for name, out in host.items():
            axes = QUANTITIES[name].axes
            trim = tuple(slice(0, e.length) if a in "TS" else slice(None) for a in axes)
            tensors[name] = np.ascontiguousarray(out["data"][r][trim])
            if spec.dtype == "uint8":
                if "scale" in out:
                    quant[name] = (float(out["scale"][r]), float(out["offset"][r]))
                else:
                    quant[name] = (PROBABILITY_SCALE, 0.0)
        yield (
            pos,
            Capture(
                tokens=e.tokens,
                sentence_b_start=e.sentence_b_start,
                layers=spec.layers,
                heads=spec.heads,
                dtype=spec.dtype,
                tensors=tensors,
                quantization=quant,
            ),
        )
