"""`Capture`: what the engine, the client and the store return for one example.

A leaf of the package (numpy only; it imports nothing but the contract): the
client builds the same objects without jax, and a capture saves to and loads
from one portable .npz file here. Views of a capture (HTML, SVG, the BertViz
adapter) live in `jaxattn.views`.

The file is a plain NumPy .npz archive (a zip of .npy arrays; readable by numpy
anywhere, no pickle): one array per captured quantity, under its name, plus
``__meta__``, a JSON string holding the format tag, tokens, sentence_b_start,
layers, heads, dtype, precision, the uint8 (scale, offset) of each tensor and
the provenance: the text (or pair) it came from, whether it was truncated, and
`provenance` (model name, weights fingerprint, config, jaxattn version, and
where it was captured). bfloat16 arrays are stored as their uint16 bit
patterns (npy has no bfloat16) and restored on load. Files of format 1
(jaxattn 0.1-0.2: no text and no provenance) still load.
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
import zipfile
from collections.abc import Mapping
from typing import overload

import numpy as np

from jaxattn.dtypes import OUTPUT_DTYPES, dequantize
from jaxattn.errors import CaptureFileError
from jaxattn.outfile import replacing
from jaxattn.quantities import QUANTITIES

FILE_FORMAT = "jaxattn.capture/2"
READABLE_FORMATS = ("jaxattn.capture/1", FILE_FORMAT)
_META = "__meta__"


def frozen(mapping: Mapping | None = None) -> Mapping:
    """A read-only view of a provenance mapping (shared by many captures)."""
    return types.MappingProxyType(dict(mapping or {}))


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
        float32; "tf32", "bf16": docs/reference/dtypes.md).
      text: the input it came from, a string or an (a, b) pair; None when
        unknown (a file of format 1).
      truncated: the text was cut to the model's maximum length.
      provenance: where it came from, read-only: "model" (name), "weights"
        (a fingerprint of the weights, `jaxattn.Engine.weights_fingerprint`),
        "family", "config" (the model config), "revision" (the Hub commit the
        weights came from; "" for a local directory), "jaxattn" (the version
        that captured it), "source" ("engine", "server HOST:PORT" or "store
        PATH"). Empty when unknown.
    """

    tokens: tuple[str, ...]
    sentence_b_start: int | None
    layers: tuple[int, ...]
    heads: tuple[int, ...]
    dtype: str
    tensors: dict[str, np.ndarray]
    quantization: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    precision: str = "highest"
    text: str | tuple[str, str] | None = None
    truncated: bool = False
    provenance: Mapping = dataclasses.field(default_factory=frozen)

    # The quantities, one typed attribute each (order and meaning: QUANTITIES).
    attention = _Quantity()
    scores = _Quantity()
    scores_c2c = _Quantity()
    scores_c2p = _Quantity()
    scores_p2c = _Quantity()
    queries = _Quantity()
    keys = _Quantity()
    values = _Quantity()
    fx_norm = _Quantity()
    alpha_fx_norm = _Quantity()
    sum_alpha_fx_norm = _Quantity()
    attn_res_norm = _Quantity()
    attn_res_ln_norm = _Quantity()
    mixing_ratio = _Quantity()
    mixing_norm = _Quantity()
    preserving_norm = _Quantity()
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

    def select(self, layers=None, heads=None) -> Capture:
        """This capture restricted to some of its layers and heads (those slices copied).

        Args:
          layers: layer numbers as in ``self.layers``, in the order wanted; None
            keeps all.
          heads: head numbers as in ``self.heads``, likewise.

        Raises:
          ValueError: a layer or head this capture does not hold (named).
        """
        picked = {}
        for key, want, have in (("L", layers, self.layers), ("H", heads, self.heads)):
            want = tuple(have) if want is None else tuple(int(i) for i in want)
            missing = [i for i in want if i not in have]
            if missing:
                what = "layers" if key == "L" else "heads"
                raise ValueError(f"{what} {missing} were not captured (have {list(have)})")
            picked[key] = [list(have).index(i) for i in want]
        tensors = {}
        for name, array in self.tensors.items():
            q = QUANTITIES[name]
            for axis, key in enumerate(q.axes[:2]):
                if key in picked:
                    extra = list(range(q.extra_layer)) if key == "L" else []
                    index = extra + [i + len(extra) for i in picked[key]]
                    array = array[(slice(None),) * axis + (index,)]
            tensors[name] = array
        layers_ = tuple(self.layers[i] for i in picked["L"])
        heads_ = tuple(self.heads[i] for i in picked["H"])
        return dataclasses.replace(self, layers=layers_, heads=heads_, tensors=tensors)

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
            text=list(self.text) if isinstance(self.text, tuple) else self.text,
            truncated=self.truncated,
            provenance=dict(self.provenance),
        )
        arrays = {_META: np.array(json.dumps(meta))}
        for name, array in self.tensors.items():
            arrays[name] = array.view(np.uint16) if self.dtype == "bfloat16" else array
        # A file object: np.savez would append ".npz" to a name. Whole or not at all.
        with replacing(path) as f:
            (np.savez_compressed if compress else np.savez)(f, **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Capture:
        """Read a capture written by `save` (any format in READABLE_FORMATS).

        Raises:
          CaptureFileError: the file is not a jaxattn capture, is damaged, or is of
            a format this jaxattn does not read (the message says what it found).
          FileNotFoundError: no such file; IsADirectoryError: a directory.
        """
        if os.path.isdir(path):
            raise IsADirectoryError(f"{path} is a directory, not a capture file (.npz)")
        try:
            loaded = np.load(path, allow_pickle=False)
            if not isinstance(loaded, np.lib.npyio.NpzFile):
                raise CaptureFileError(f"{path} is a single NumPy array (.npy), not a jaxattn "
                                       "capture (.npz written by Capture.save)")  # fmt: skip
            with loaded as archive:
                meta, tensors = _read_archive(path, archive)
            return _from_meta(cls, meta, tensors)
        except KeyError as e:
            raise CaptureFileError(f"{path} is a damaged jaxattn capture: its metadata lacks "
                                   f"{e}") from None  # fmt: skip
        except (OSError, ValueError, zipfile.BadZipFile, EOFError, TypeError) as e:
            if isinstance(e, (FileNotFoundError, CaptureFileError)):
                raise
            raise CaptureFileError(f"{path} is not a readable jaxattn capture file (.npz written "
                                   f"by Capture.save): {_reason(e)}") from None  # fmt: skip

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


def _reason(error: Exception) -> str:
    if isinstance(error, UnicodeDecodeError | zipfile.BadZipFile) or "pickle" in str(error):
        return "not a NumPy .npz archive"
    return str(error)


def _read_archive(path, archive) -> tuple[dict, dict[str, np.ndarray]]:
    """(meta, name -> array in the output dtype) of an open .npz archive."""
    if not hasattr(archive, "files") or _META not in archive.files:
        raise CaptureFileError(
            f"{path} is a NumPy file but not a jaxattn capture (it has no {_META} entry)"
        )
    meta = json.loads(str(archive[_META]))
    found = meta.get("format") if isinstance(meta, dict) else None
    if found not in READABLE_FORMATS:
        raise CaptureFileError(
            f"{path} is of capture format {found!r}; this jaxattn reads "
            f"{', '.join(READABLE_FORMATS)} (a newer jaxattn wrote it? upgrade)"
        )
    dtype = OUTPUT_DTYPES[meta["dtype"]]
    tensors = {name: archive[name].view(dtype) for name in meta["tensors"]}
    return meta, tensors


def _from_meta(cls, meta: dict, tensors: dict) -> Capture:
    text = meta.get("text")
    return cls(
        tokens=tuple(meta["tokens"]),
        sentence_b_start=meta["sentence_b_start"],
        layers=tuple(meta["layers"]),
        heads=tuple(meta["heads"]),
        dtype=meta["dtype"],
        tensors=tensors,
        quantization={k: (float(v[0]), float(v[1])) for k, v in meta["quantization"].items()},
        precision=meta.get("precision", "highest"),  # files of jaxattn 0.1 have none
        text=tuple(text) if isinstance(text, list) else text,
        truncated=bool(meta.get("truncated", False)),
        provenance=frozen(meta.get("provenance")),
    )
