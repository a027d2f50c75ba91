"""A Capture in the shape BertViz takes (`bertviz.head_view` / `bertviz.model_view`)."""

from __future__ import annotations

import numpy as np

from jaxattn.capture import Capture
from jaxattn.quantities import QUANTITIES


def to_bertviz(cap: Capture, quantity: str = "attention", *, torch: bool | None = None) -> dict:
    """The keyword arguments of `bertviz.head_view` / `bertviz.model_view`.

        from bertviz import head_view
        head_view(**to_bertviz(cap))

    Args:
      cap: a capture holding `quantity`.
      quantity: an [L, H, T, S] quantity: attention (the default), or
        alpha_fx_norm / scores to view those instead.
      torch: give torch tensors (what bertviz's code calls `.squeeze`/`torch.stack`
        on); None = torch tensors if torch is installed, else numpy arrays.

    Returns:
      {"attention": one [1, H, T, T] float32 array per captured layer, in
      `cap.layers` order, "tokens": the word pieces, "sentence_b_start": int or
      None}. Only the captured layers and heads are present.

    Raises:
      ValueError: `quantity` is not an [L, H, T, S] tensor of this capture.
    """
    if quantity not in QUANTITIES or QUANTITIES[quantity].axes != "LHTS":
        valid = [n for n, q in QUANTITIES.items() if q.axes == "LHTS"]
        raise ValueError(f"quantity must be one of {', '.join(valid)}, got {quantity!r}")
    array = np.asarray(cap.array(quantity), dtype=np.float32)  # [L, H, T, S]
    layers = [array[i][None] for i in range(array.shape[0])]  # each [1, H, T, S]
    if torch is None:
        import importlib.util

        torch = importlib.util.find_spec("torch") is not None
    if torch:
        import torch as _torch  # only when asked or installed: the client does not need it

        layers = [_torch.from_numpy(np.ascontiguousarray(a)) for a in layers]
    return dict(attention=tuple(layers), tokens=list(cap.tokens),
                sentence_b_start=cap.sentence_b_start)  # fmt: skip
