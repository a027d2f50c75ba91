"""`Capture.load` (`jaxattn.capture.npz.read`) on hostile files.

An input that starts like a zip (``PK``) is the whole file; any other input is
the ``__meta__`` JSON of an otherwise well-formed archive (the part a zip's
CRC would otherwise keep a byte-level mutator away from). A file that loads
must give a Capture whose fields have the types `Capture` documents and whose
tensors have the shapes they say (one layer and head of it can be selected).
"""

from __future__ import annotations

import io
import json

import numpy as np
from capture_samples import make
from harness import write

from jaxattn import Capture
from jaxattn.continuations import STOPS
from jaxattn.dtypes import OUTPUT_DTYPES
from jaxattn.errors import CaptureFileError

DESIGNED = (CaptureFileError,)
TOKENS = (b'"tokens"', b'"dtype"', b'"tensors"', b'"quantization"', b'"format"', b"[[[[", b"{")
TOKENS += (b'"jaxattn.capture/1"', b'"uint8"', b'"bfloat16"', b"null", b"[]", b"{}", b'"\\ud800"')
_TENSORS = make("float32").tensors


def seeds() -> list[bytes]:
    out = []
    for dtype in OUTPUT_DTYPES:
        path = write("seed.npz", b"")
        make(dtype).save(path)
        out.append(path.read_bytes())
        with np.load(path) as archive:
            out.append(str(archive["__meta__"]).encode())
    return out


def _archive(meta: bytes) -> bytes:
    buf = io.BytesIO()
    text = meta.decode("utf-8", "surrogateescape")
    np.savez(buf, __meta__=np.array(text), **_TENSORS)
    return buf.getvalue()


def one_input(data: bytes) -> None:
    path = write("capture.npz", data if data.startswith(b"PK") else _archive(data))
    cap = Capture.load(path)
    assert all(isinstance(t, str) for t in cap.tokens), cap.tokens
    assert all(type(i) is int for i in (*cap.layers, *cap.heads, *cap.kv_heads))
    b = cap.sentence_b_start
    assert b is None or (type(b) is int and 0 <= b <= len(cap.tokens)), b
    assert cap.dtype in OUTPUT_DTYPES, cap.dtype
    assert cap.stop is None or cap.stop in STOPS, cap.stop
    for name, array in cap.tensors.items():
        assert isinstance(name, str) and isinstance(array, np.ndarray), name
    json.dumps(dict(cap.provenance))
    if cap.layers and cap.heads:  # its tensors index as its fields say (no IndexError)
        cap.select(layers=cap.layers[-1:], heads=cap.heads[-1:])
