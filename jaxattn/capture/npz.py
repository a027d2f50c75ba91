"""The capture file: one `jaxattn.Capture` as a portable .npz archive (`Capture.save`/`load`).

The file is a plain NumPy .npz archive (a zip of .npy arrays; readable by numpy
anywhere, no pickle): one array per captured quantity, under its name, plus
``__meta__``, a JSON string holding the format tag, tokens, sentence_b_start,
layers, heads, kv_heads (a grouped-query capture's key/value heads; [] otherwise,
and absent from older files), query_positions and key_positions (the token positions
of the maps' rows and keys, only where the capture selected them: such a file is of
format 3, which readers of format 2 refuse rather than take its maps for whole
ones), dtype, precision, the uint8 (scale, offset) of each tensor and
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
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, TypeError) as e:
        if isinstance(e, (FileNotFoundError, CaptureFileError)):
            raise
        raise CaptureFileError(
            f"{path} is not a readable jaxattn capture file (.npz written by Capture.save): "
            f"{_reason(e)}"
        ) from None


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
    )
