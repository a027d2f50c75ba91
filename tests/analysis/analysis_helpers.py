"""Hand-made captures for the analysis tests (numpy only)."""

from __future__ import annotations

import numpy as np

from jaxattn.capture import Capture

# The docs' example pair (README.md, docs/python.md), as BERT-uncased tokenises it.
PAIR_TOKENS = tuple(
    "[CLS] i went to the store . [SEP] "
    "at the store , i bought fresh straw ##berries . [SEP]".split()
)
PAIR_B = 8
T = len(PAIR_TOKENS)  # 19


def make_capture(attention, tokens=PAIR_TOKENS, sentence_b_start=PAIR_B, **extra) -> Capture:
    """A float32 Capture of [L, H, T, T] maps (2-D or 3-D inputs get leading axes)."""
    att = np.asarray(attention, np.float32)
    while att.ndim < 4:
        att = att[None]
    tensors = {"attention": att}
    tensors.update({k: np.asarray(v, np.float32) for k, v in extra.items()})
    return Capture(
        tokens=tuple(tokens),
        sentence_b_start=sentence_b_start,
        layers=tuple(range(att.shape[0])),
        heads=tuple(range(att.shape[1])),
        dtype="float32",
        tensors=tensors,
    )


def uniform(t: int = T) -> np.ndarray:
    return np.full((t, t), 1.0 / t)


def identity(t: int = T) -> np.ndarray:
    return np.eye(t)


def next_token(t: int = T) -> np.ndarray:
    """Each row on the next token; the last row on itself."""
    m = np.eye(t, k=1)
    m[-1, -1] = 1.0
    return m


def previous_token(t: int = T) -> np.ndarray:
    """Each row on the previous token; the first row on itself."""
    m = np.eye(t, k=-1)
    m[0, 0] = 1.0
    return m


def one_hot(column: int, t: int = T) -> np.ndarray:
    m = np.zeros((t, t))
    m[:, column] = 1.0
    return m


def block_diagonal(b: int = PAIR_B, t: int = T) -> np.ndarray:
    """Uniform within each segment [0, b) and [b, t)."""
    m = np.zeros((t, t))
    m[:b, :b] = 1.0 / b
    m[b:, b:] = 1.0 / (t - b)
    return m
