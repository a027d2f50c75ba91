"""The capture file: one `jaxattn.Capture` as a portable .npz archive (`Capture.save`/`load`).

The file is a plain NumPy .npz archive (a zip of .npy arrays; readable by numpy
anywhere, no pickle): one array per captured quantity, under its name, plus
``__meta__``, a JSON string holding the format tag, tokens, sentence_b_start,
layers, heads, kv_heads (a grouped-query capture's key/value heads; [] otherwise,
and absent from older files), query_positions and key_positions (the token positions
of the maps' rows and keys, only where the capture selected them: such a file is of
format 3, which readers of format 2 refuse rather than take its maps for whole
ones), generated_start (the first generated token of a decoder's continuation; absent
when none: readers before it ignore it and show the whole as one text), stop (why
that continuation ended, one of `jaxattn.continuations.STOPS`; absent when none), dtype,
precision, the uint8 (scale, offset) of each tensor and
the provenance: the text (or pair) it came from, whether it was truncated, and
`provenance` (model name, weights fingerprint, config, jaxattn version, and
where it was captured). bfloat16 arrays are stored as their uint16 bit
patterns (npy has no bfloat16) and restored on load. Files of format 1
(jaxattn 0.1-0.2: no text and no provenance) still load.
"""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np

from jaxattn.capture.shapes import layout_problem
from jaxattn.continuations import STOPS
from jaxattn.dtypes import OUTPUT_DTYPES, to_bits
from jaxattn.errors import CaptureFileError
from jaxattn.outfile import replacing

FILE_FORMAT = "jaxattn.capture/2"
# A capture whose maps hold selected query rows or keys: a reader of format 2 would
# take them for whole maps, so such a file is of a format it refuses.
SELECTED_FORMAT = "jaxattn.capture/3"
READABLE_FORMATS = ("jaxattn.capture/1", FILE_FORMAT, SELECTED_FORMAT)
_POSITIONS = ("query_positions", "key_positions")
_META = "__meta__"


def write(cap, path: str | os.PathLike, *, compress: bool = False) -> None:
    """Write `cap` (a `jaxattn.Capture`) to `path`, whole or not at all (`Capture.save`)."""
    selected = {f: list(getattr(cap, f)) for f in _POSITIONS if getattr(cap, f) is not None}
    generated = {
        k: getattr(cap, k) for k in ("generated_start", "stop") if getattr(cap, k) is not None
    }
    meta = dict(
        format=SELECTED_FORMAT if selected else FILE_FORMAT,
        tokens=list(cap.tokens),
        sentence_b_start=cap.sentence_b_start,
        layers=list(cap.layers),
        heads=list(cap.heads),
        kv_heads=list(cap.kv_heads),
        dtype=cap.dtype,
        tensors=list(cap.tensors),
        quantization={k: list(v) for k, v in cap.quantization.items()},
        precision=cap.precision,
        text=list(cap.text) if isinstance(cap.text, tuple) else cap.text,
        truncated=cap.truncated,
        provenance=dict(cap.provenance),
        **selected,
        **generated,
    )
    arrays = {_META: np.array(json.dumps(meta))}
    for name, array in cap.tensors.items():
        arrays[name] = to_bits(array, cap.dtype)  # bfloat16: npy has none, its bits
    # A file object: np.savez would append ".npz" to a name. Whole or not at all.
    with replacing(path) as f:
        (np.savez_compressed if compress else np.savez)(f, **arrays)


def read(path: str | os.PathLike) -> dict:
    """The `Capture` fields of a file `write` wrote (provenance a plain dict): `Capture.load`.

    Raises:
      CaptureFileError, FileNotFoundError, IsADirectoryError: as `Capture.load`.
    """
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path} is a directory, not a capture file (.npz)")
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise CaptureFileError(
                f"{path} is a single NumPy array (.npy), not a jaxattn capture (.npz written "
                "by Capture.save)"
            )
        with loaded as archive:
            meta, tensors = _read_archive(path, archive)
        return _fields(meta, tensors)
    except KeyError as e:
        raise CaptureFileError(
            f"{path} is a damaged jaxattn capture: its metadata lacks {e}"
        ) from None
    except (
        OSError,
        ValueError,
        zipfile.BadZipFile,
        EOFError,
        TypeError,
        NotImplementedError,  # zipfile: a compression method or zip version it lacks
        RecursionError,  # json: __meta__ nested too deeply
        MemoryError,  # an array header claiming more than the machine holds
    ) as e:
        if isinstance(e, (FileNotFoundError, CaptureFileError)):
            raise
        raise CaptureFileError(
            f"{path} is not a readable jaxattn capture file (.npz written by Capture.save): "
            f"{_reason(e)}"
        ) from None


def _reason(error: Exception) -> str:
    if isinstance(error, UnicodeDecodeError | zipfile.BadZipFile) or "pickle" in str(error):
        return "not a NumPy .npz archive"
    if isinstance(error, RecursionError):
        return f"its {_META} is nested too deeply"
    if isinstance(error, MemoryError):
        return f"an array in it claims more memory than this machine has ({error})"
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
    problem, tensors = _field_problem(meta), {}
    if not problem:
        dtype = OUTPUT_DTYPES[meta["dtype"]]
        tensors = {name: archive[name].view(dtype) for name in meta["tensors"]}
        problem = layout_problem(
            tokens=len(meta["tokens"]),
            layers=len(meta["layers"]),
            heads=len(meta["heads"]),
            kv_heads=meta.get("kv_heads"),  # None: a file from before it, G not said
            query_positions=meta.get("query_positions"),
            key_positions=meta.get("key_positions"),
            shapes={name: array.shape for name, array in tensors.items()},
        )
    unscaled = [n for n in tensors if meta["dtype"] == "uint8" and n not in meta["quantization"]]
    if unscaled and not problem:
        problem = f"uint8 tensor {unscaled[0]!r} has no [scale, offset] in its quantization"
    if problem:
        raise CaptureFileError(f"{path} is a damaged jaxattn capture: {problem}")
    return meta, tensors


def _ints(value) -> bool:
    return isinstance(value, list) and all(type(i) is int for i in value)


def _strings(value) -> bool:
    return isinstance(value, list) and all(isinstance(t, str) for t in value)


def _scales(value) -> bool:
    """name -> [scale, offset], two numbers each."""
    pairs = value.values() if isinstance(value, dict) else [None]
    return all(
        isinstance(p, list) and len(p) == 2 and all(type(x) in (int, float) for x in p)
        for p in pairs
    )


# __meta__ field -> (whether a value is of the right kind, the kind in words). Absent
# optional fields are checked by `_fields`' defaults; a missing required one is a KeyError.
_KINDS = {
    "tokens": (_strings, "a list of strings"),
    "sentence_b_start": (lambda v: v is None or type(v) is int, "null or a whole number"),
    "generated_start": (lambda v: v is None or type(v) is int, "null or a whole number"),
    "stop": (lambda v: v is None or (isinstance(v, str) and v in STOPS), ", ".join(STOPS)),
    "layers": (_ints, "a list of whole numbers"),
    "heads": (_ints, "a list of whole numbers"),
    "kv_heads": (_ints, "a list of whole numbers"),
    "dtype": (lambda v: isinstance(v, str) and v in OUTPUT_DTYPES, ", ".join(OUTPUT_DTYPES)),
    "tensors": (_strings, "a list of strings"),
    "quantization": (_scales, "an object of [scale, offset] pairs"),
    "precision": (lambda v: isinstance(v, str), "a string"),
    "text": (lambda v: v is None or isinstance(v, str) or _strings(v), "a string or a pair"),
    "provenance": (lambda v: v is None or isinstance(v, dict), "an object"),
    **{f: (lambda v: v is None or _ints(v), "null or a list of whole numbers") for f in _POSITIONS},
}


def _field_problem(meta: dict) -> str | None:
    """The first __meta__ field not of the kind `write` writes, in words (None: none)."""
    for key, (ok, words) in _KINDS.items():
        if key in meta and not ok(meta[key]):
            return f"its metadata's {key} is {str(meta[key])[:60]}, not {words}"
    text = meta.get("text")
    for key in ("sentence_b_start", "generated_start"):
        b = meta.get(key)
        if b is not None and not 0 <= b <= len(meta.get("tokens", ())):
            return f"its metadata's {key} {b} is past its tokens"
    if isinstance(text, list) and len(text) != 2:
        return f"its metadata's text is a list of {len(text)}, not a pair"
    if meta.get("stop") is not None and meta.get("generated_start") is None:
        return "its metadata's stop is set without a generated_start (no continuation)"
    return None


def _fields(meta: dict, tensors: dict) -> dict:
    text = meta.get("text")
    return dict(
        tokens=tuple(meta["tokens"]),
        sentence_b_start=meta["sentence_b_start"],
        layers=tuple(meta["layers"]),
        heads=tuple(meta["heads"]),
        kv_heads=tuple(meta.get("kv_heads", ())),  # files of jaxattn before it: none
        dtype=meta["dtype"],
        tensors=tensors,
        quantization={k: (float(v[0]), float(v[1])) for k, v in meta["quantization"].items()},
        precision=meta.get("precision", "highest"),  # files of jaxattn 0.1 have none
        text=tuple(text) if isinstance(text, list) else text,
        truncated=bool(meta.get("truncated", False)),
        provenance=dict(meta.get("provenance") or {}),
        **{f: None if meta.get(f) is None else tuple(meta[f]) for f in _POSITIONS},
        generated_start=meta.get("generated_start"),  # absent: no generated tokens
        stop=meta.get("stop"),  # absent: no generated tokens, or a file from before it
    )
