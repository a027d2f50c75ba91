"""`Capture`: what the engine, the client and the store return for one example.

A leaf of the package (numpy only; it imports nothing but the contract): the
client builds the same objects without jax, and a capture saves to and loads
from one portable .npz file here. Views of a capture (HTML, SVG, the BertViz
adapter) live in `jaxattn.views`.

The file is a plain NumPy .npz archive (a zip of .npy arrays; readable by numpy
anywhere, no pickle): one array per captured quantity, under its name, plus
``__meta__``, a JSON string holding the format tag, tokens, sentence_b_start,
layers, heads, dtype and the uint8 (scale, offset) of each tensor. bfloat16
arrays are stored as their uint16 bit patterns (npy has no bfloat16) and
restored on load.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import overload

import numpy as np

from jaxattn.dtypes import OUTPUT_DTYPES, dequantize
from jaxattn.quantities import QUANTITIES

FILE_FORMAT = "jaxattn.capture/1"
_META = "__meta__"


class _Quantity:
    """A capturable quantity as a typed attribute of `Capture`: its decoded array.

    Reading one that was not captured raises AttributeError naming what was.
    """

    def __set_name__(self, owner, name: str) -> None:
        self.name = name
        q = QUANTITIES[name]
        self.__doc__ = f"[{', '.join(q.axes)}] {q.doc}"

    @overload
    def __get__(self, cap: None, owner=None) -> _Quantity: ...
    @overload
    def __get__(self, cap: Capture, owner=None) -> np.ndarray: ...
    def __get__(self, cap, owner=None):
        if cap is None:
            return self
        return cap.array(self.name)


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Capture:
    """The captured tensors of one example, trimmed to its real length T.

    Every captured quantity is an attribute of the same name (``cap.attention``,
    ``cap.alpha_fx_norm``, ...; declared below): a numpy array with the axes of
    `jaxattn.quantities.QUANTITIES`. float32/float16/bfloat16 captures give the
    arrays as stored; uint8 captures give them dequantised to float32 (the raw
    bytes stay available through `encoded`).

    Attributes:
      tokens: the word pieces, special tokens included ([CLS] ... [SEP]).
      sentence_b_start: index of the first token of sentence B, or None for a
        single sentence.
      layers: the captured layer indices (0-indexed).
      heads: the captured head indices (0-indexed).
      dtype: the output dtype (a key of `jaxattn.dtypes.OUTPUT_DTYPES`).
      tensors: name -> array in the output dtype (uint8 stays uint8).
      quantization: name -> (scale, offset) for uint8 tensors.
      precision: the compute precision that produced it ("highest": exact
        float32; "tf32", "bf16": see the README's table).
    """

    tokens: tuple[str, ...]
    sentence_b_start: int | None
    layers: tuple[int, ...]
    heads: tuple[int, ...]
    dtype: str
    tensors: dict[str, np.ndarray]
    quantization: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    precision: str = "highest"

    # The quantities, one typed attribute each (order and meaning: QUANTITIES).
    attention = _Quantity()
    scores = _Quantity()
    queries = _Quantity()
    keys = _Quantity()
    values = _Quantity()
    fx_norm = _Quantity()
    alpha_fx_norm = _Quantity()
    sum_alpha_fx_norm = _Quantity()
    attn_res_norm = _Quantity()
    attn_res_ln_norm = _Quantity()
    head_stats = _Quantity()
    norm_head_stats = _Quantity()
    hidden_states = _Quantity()

    @property
    def what(self) -> tuple[str, ...]:
        """The captured quantity names."""
        return tuple(self.tensors)

    @property
    def length(self) -> int:
        """T, the example's real length in tokens."""
        return len(self.tokens)

    def encoded(self, name: str) -> tuple[np.ndarray, float | None, float | None]:
        """The raw array of `name` in the output dtype, with its uint8 (scale, offset) or Nones."""
        self._check(name)
        scale, offset = self.quantization.get(name, (None, None))
        return self.tensors[name], scale, offset

    def array(self, name: str) -> np.ndarray:
        """The decoded array of quantity `name` (same as the attribute)."""
        return dequantize(*self.encoded(name))

    def save(self, path: str | os.PathLike, *, compress: bool = False) -> None:
        """Write this capture to one portable .npz file (any name; no suffix is added).

        Args:
          path: the file to write (overwritten).
          compress: deflate the arrays (smaller, slower; attention maps shrink little).
        """
        meta = dict(
            format=FILE_FORMAT,
            tokens=list(self.tokens),
            sentence_b_start=self.sentence_b_start,
            layers=list(self.layers),
            heads=list(self.heads),
            dtype=self.dtype,
            tensors=list(self.tensors),
            quantization={k: list(v) for k, v in self.quantization.items()},
            precision=self.precision,
        )
        arrays = {_META: np.array(json.dumps(meta))}
        for name, array in self.tensors.items():
            arrays[name] = array.view(np.uint16) if self.dtype == "bfloat16" else array
        with open(path, "wb") as f:  # a file object: np.savez would append ".npz" to a name
            (np.savez_compressed if compress else np.savez)(f, **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Capture:
        """Read a capture written by `save`.

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
            if meta.get("format") != FILE_FORMAT:
                raise ValueError(f"{path}: unsupported format {meta.get('format')!r}, "
                                 f"this jaxattn reads {FILE_FORMAT}")  # fmt: skip
            dtype = OUTPUT_DTYPES[meta["dtype"]]
            tensors = {name: archive[name].view(dtype) for name in meta["tensors"]}
        return cls(
            tokens=tuple(meta["tokens"]),
            sentence_b_start=meta["sentence_b_start"],
            layers=tuple(meta["layers"]),
            heads=tuple(meta["heads"]),
            dtype=meta["dtype"],
            tensors=tensors,
            quantization={k: (float(v[0]), float(v[1])) for k, v in meta["quantization"].items()},
            precision=meta.get("precision", "highest"),  # files of jaxattn 0.1 have none
        )

    def _check(self, name: str) -> None:
        if name not in self.tensors:
            if name in QUANTITIES:
                raise AttributeError(
                    f"{name!r} was not captured; this capture holds {', '.join(self.tensors)}"
                    f" (ask for it with what=(..., {name!r}))"
                )
            raise AttributeError(
                f"Capture has no quantity {name!r}; quantities are {', '.join(QUANTITIES)}"
            )

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}{list(v.shape)}" for k, v in self.tensors.items())
        return (
            f"Capture(T={self.length}, layers={list(self.layers)}, heads={list(self.heads)}, "
            f"dtype={self.dtype}, precision={self.precision}, {shapes})"
        )
