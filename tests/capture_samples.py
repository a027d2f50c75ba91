"""Small hand-made Captures (no model) for tests of the numpy-only side."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from jaxattn import Capture
from jaxattn.capture.part import CapturePart

CASTS = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def make(dtype: str) -> Capture:
    rng = np.random.default_rng(3)
    att = rng.random((2, 3, 5, 5)).astype(np.float32)
    norm = rng.random((2, 3, 5)).astype(np.float32)
    if dtype == "uint8":
        tensors = {
            "attention": np.round(att * 255).astype(np.uint8),
            "fx_norm": np.round(norm * 255).astype(np.uint8),
        }
        quant = {"attention": (1 / 255, 0.0), "fx_norm": (0.004, 0.25)}
    else:
        tensors = {"attention": att.astype(CASTS[dtype]), "fx_norm": norm.astype(CASTS[dtype])}
        quant = {}
    return Capture(
        tokens=("[CLS]", "a", "[SEP]", "b", "[SEP]"),
        sentence_b_start=3,
        layers=(1, 4),
        heads=(0, 2, 5),
        dtype=dtype,
        tensors=tensors,
        quantization=quant,
    )


def cut(cap: Capture, cuts: tuple[int, ...]) -> list[CapturePart]:
    """The parts the engine would hand over: each tensor's entries of each group."""
    one = CapturePart.of(cap)
    out = []
    for k in range(len(cuts) - 1):
        part = CapturePart(fields=one.fields, cuts=cuts, part=k, tensors={}, quantization={})
        tensors = {}
        for name, t in cap.tensors.items():
            lo, hi = part.entries(name)
            tensors[name] = t[lo:hi]
        out.append(
            CapturePart(
                fields=one.fields,
                cuts=cuts,
                part=k,
                tensors=tensors,
                quantization=dict(cap.quantization),
            )
        )
    return out
