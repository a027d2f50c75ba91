"""A Capture as the arguments of BertViz's views (`bertviz.head_view` / `bertviz.model_view`).

BertViz 1.4.1 takes `attention` as a sequence of per-layer torch tensors
[1, heads, T, T] and calls `torch.stack` on them, so it needs torch (numpy
arrays or plain lists fail inside it). It picks layers and heads by their
index in that sequence and axis and labels them with those indices, so the
adapter puts each captured layer and head at its real index (the gaps are
zeros) and names the captured ones in `include_layers` / `include_heads`
(model view) or `heads` (head view): layer 9 shows as layer 9.

    from bertviz import head_view, model_view
    head_view(**to_bertviz(cap))
    model_view(**to_bertviz(cap, view="model"))
    head_view(**to_bertviz(cap, "alpha_fx_norm"))   # norm-based, rows normalised
"""

from __future__ import annotations

import importlib.util

import numpy as np

from jaxattn.analysis.weights import normalise_rows
from jaxattn.capture import Capture, one_capture
from jaxattn.errors import UsageError

# quantity -> how it is shown; scores (logits, unbounded) are no weights BertViz can draw
WEIGHTS = {"attention": "as captured", "alpha_fx_norm": "rows normalised to sum 1"}
VIEWS = ("head", "model")
TORCH_HINT = "BertViz needs torch (it calls torch.stack on the attention): pip install torch"


def to_bertviz(
    cap: Capture, quantity: str = "attention", *, view: str = "head", torch: bool | None = None
) -> dict:
    """The keyword arguments of `bertviz.head_view` (view="head") or `bertviz.model_view`.

    Args:
      cap: a capture holding `quantity`.
      quantity: "attention" (the default) or "alpha_fx_norm", the norm-based
        weights ||alpha f(x)|| of Kobayashi et al. 2020, each row divided by
        its sum (BertViz draws a weight as line opacity / cell colour, so rows
        are scaled to sum 1 like attention; all-zero rows stay zero).
      view: "head" for `head_view` (passes `heads`, the captured heads, as the
        initially shown ones) or "model" for `model_view` (passes
        `include_heads`); the two functions take different head arguments.
      torch: None or True: torch tensors, what BertViz takes (a UsageError
        when torch is not installed). False: the same arrays as numpy, for
        other tools; BertViz itself cannot use them.

    Returns:
      {"attention": a tuple of max(cap.layers)+1 float32 [1, max(cap.heads)+1,
      T, T] tensors, captured layer l at index l with head h at index h, the
      rest zeros (one shared zero tensor stands for every layer not captured);
      "tokens": the word pieces; "sentence_b_start": int or None;
      "include_layers": cap.layers; and "heads" (head view) or
      "include_heads" (model view): cap.heads}. The arrays are fresh and
      writable.

    Raises:
      UsageError: an unknown quantity or view, a capture without the
        quantity or without tokens, or no torch when torch tensors are asked for.
    """
    one_capture(cap, "to_bertviz")
    if quantity not in WEIGHTS:
        raise UsageError(
            f"BertViz can show {' or '.join(WEIGHTS)}, not {quantity!r}"
            + (" (logits; use 'attention', their softmax)" if quantity == "scores" else "")
        )
    if view not in VIEWS:
        raise UsageError(f"view must be 'head' (head_view) or 'model' (model_view), got {view!r}")
    if quantity not in cap.tensors:
        raise UsageError(
            f"the capture has no {quantity!r} (it holds {', '.join(cap.tensors) or 'nothing'}): "
            f"capture it with what=(..., {quantity!r}) or `jaxattn capture --what {quantity}`"
        )
    if not cap.tokens or not cap.layers or not cap.heads:
        raise UsageError("the capture is empty (no tokens, layers or heads): nothing to show")
    if (torch is None or torch) and not _torch_installed():
        raise UsageError(TORCH_HINT + " (torch=False gives numpy arrays, for other tools)")
    cap.check_full_maps("BertViz")
    weights = np.asarray(cap.array(quantity), dtype=np.float32)  # [L, H, T, T]
    if quantity == "alpha_fx_norm":
        weights = normalise_rows(weights).astype(np.float32)
    layers = _at_real_indices(weights, cap.layers, cap.heads)
    if torch is None or torch:
        import torch as _torch  # only here: a client-only install never imports it

        tensors = {id(a): _torch.from_numpy(a) for a in layers}  # the shared zeros stay shared
        layers = [tensors[id(a)] for a in layers]
    heads_key = "heads" if view == "head" else "include_heads"
    return {
        "attention": tuple(layers),
        "tokens": [str(t) for t in cap.tokens],
        "sentence_b_start": None if cap.sentence_b_start is None else int(cap.sentence_b_start),
        "include_layers": [int(i) for i in cap.layers],  # python ints: BertViz json.dumps them
        heads_key: [int(h) for h in cap.heads],
    }


def _torch_installed() -> bool:
    return importlib.util.find_spec("torch") is not None


def _at_real_indices(weights: np.ndarray, layers, heads) -> list[np.ndarray]:
    """[L, H, T, T] -> max(layers)+1 fresh [1, max(heads)+1, T, T] arrays at the real indices."""
    n_heads, t = max(heads) + 1, weights.shape[-1]
    zeros = np.zeros((1, n_heads, t, t), np.float32)  # every layer not captured: never drawn
    out = [zeros] * (max(layers) + 1)
    for i, layer in enumerate(layers):
        full = np.zeros((1, n_heads, t, t), np.float32)
        full[0, list(heads)] = weights[i]
        out[layer] = full
    return out
