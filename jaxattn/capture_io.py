"""A Capture as one portable file, and in the shape BertViz takes.

The file is a plain NumPy .npz archive (a zip of .npy arrays; readable by
numpy anywhere, no pickle): one array per captured quantity, under its name,
plus ``__meta__``, a JSON string holding the format tag, tokens,
sentence_b_start, layers, heads, dtype and the uint8 (scale, offset) of each
tensor. bfloat16 arrays are stored as their uint16 bit patterns (npy has no
bfloat16) and restored on load. Numpy-only: the client saves and loads too.
"""

from __future__ import annotations

import json
import os

import numpy as np

from jaxattn.capture import Capture
from jaxattn.encodings import ENCODINGS

FORMAT = "jaxattn.capture/1"
_META = "__meta__"


def save(cap: Capture, path: str | os.PathLike, *, compress: bool = False) -> None:
    """Write `cap` to `path` (any name; no suffix is added).

    Args:
      cap: the capture.
      path: the file to write (overwritten).
      compress: deflate the arrays (smaller, slower; attention maps shrink little).
    """
    meta = dict(
        format=FORMAT,
        tokens=list(cap.tokens),
        sentence_b_start=cap.sentence_b_start,
        layers=list(cap.layers),
        heads=list(cap.heads),
        dtype=cap.dtype,
        tensors=list(cap.tensors),
        quantization={k: list(v) for k, v in cap.quantization.items()},
    )
    arrays = {_META: np.array(json.dumps(meta))}
    for name, array in cap.tensors.items():
        arrays[name] = array.view(np.uint16) if cap.dtype == "bfloat16" else array
    with open(path, "wb") as f:  # a file object: np.savez would append ".npz" to a name
        (np.savez_compressed if compress else np.savez)(f, **arrays)


def load(path: str | os.PathLike) -> Capture:
    """Read a Capture written by `save`.

    Raises:
      ValueError: the file is not a jaxattn capture (or a newer format).
      FileNotFoundError: no such file.
    """
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise ValueError(f"{path} is not a jaxattn capture file: {e}") from None
    with archive:
        if _META not in archive.files:
            raise ValueError(f"{path} is not a jaxattn capture file (no {_META})")
        meta = json.loads(str(archive[_META]))
        if meta.get("format") != FORMAT:
            raise ValueError(f"{path}: unsupported format {meta.get('format')!r}, "
                             f"this jaxattn reads {FORMAT}")  # fmt: skip
        dtype = ENCODINGS[meta["dtype"]]
        tensors = {name: archive[name].view(dtype) for name in meta["tensors"]}
    return Capture(
        tokens=tuple(meta["tokens"]),
        sentence_b_start=meta["sentence_b_start"],
        layers=tuple(meta["layers"]),
        heads=tuple(meta["heads"]),
        dtype=meta["dtype"],
        tensors=tensors,
        quantization={k: (float(v[0]), float(v[1])) for k, v in meta["quantization"].items()},
    )


def to_bertviz(cap: Capture, quantity: str = "attention", *, torch: bool | None = None) -> dict:
    """The keyword arguments of `bertviz.head_view` / `bertviz.model_view`.

        from bertviz import head_view
        head_view(**cap.to_bertviz())

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
    from jaxattn.quantities import QUANTITIES

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
