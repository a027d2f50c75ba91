"""Whether a capture is a decoder's, and the mask of what its queries see (numpy only).

A decoder's (causal) query i sees keys j <= i only; the views draw nothing for
j > i (`payload.view_weights` zeroes those weights) and say so.
"""

from __future__ import annotations

import numpy as np

from jaxattn.capture import Capture


def is_causal(cap: Capture) -> bool:
    """Whether a capture is a decoder's (query i sees keys j <= i only).

    Its provenance says so (`jaxattn.info.provenance`), or in older files its model
    config; otherwise (a file older still) the attention decides: a text of two or
    more tokens, no sentence pair, and every weight above the diagonal exactly 0
    (an encoder's softmax is never exactly 0 there).
    """
    if "causal" in cap.provenance:
        return bool(cap.provenance["causal"])
    config = cap.provenance.get("config") or {}
    if "causal" in config:
        return bool(config["causal"])
    if cap.length < 2 or cap.sentence_b_start is not None or "attention" not in cap.tensors:
        return False
    att = cap.tensors["attention"]  # raw: uint8 0 is weight 0 only with offset 0
    _, offset = cap.quantization.get("attention", (None, 0.0))
    if offset:
        return False
    heads = att.reshape(-1, cap.length, cap.length)
    return not any(np.triu(m, 1).any() for m in heads)  # a head at a time


def default_query(cap: Capture) -> int:
    """The neuron view's query when none is named: a decoder's last token (its first
    sees only itself, a one-line picture), else token 0 (neuron.js: the same rule)."""
    return cap.length - 1 if cap.length and is_causal(cap) else 0


def causal_mask(t: int) -> np.ndarray:
    """[T, T] booleans: True where query i may attend to key j (j <= i)."""
    return np.tril(np.ones((t, t), bool))
