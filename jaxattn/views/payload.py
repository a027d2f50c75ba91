"""Captures -> the JSON document every view draws from (numpy only).

The document (``build_payload(...)``) is what the HTML file embeds and what the web
viewer's ``/api/view`` answers::

    {"format": "jaxattn.views/1", "views": ["head", ...],
     "examples": [{"label", "tokens", "sentence_b_start", "layers", "heads",
                   "weights": {"attention": ARRAY, "norm": ARRAY},   # [L, H, T, T]
                   "queries": ARRAY, "keys": ARRAY,                  # [L, H, T, K]
                   "stats": {...}}]}                                 # see `stats.py`

An ARRAY is ``{"dtype": "f4" | "u1", "shape", "scale", "offset", "b64"}``: the
little-endian bytes, zlib-compressed, base64-encoded; the browser inflates them
with ``DecompressionStream("deflate")`` (zlib format). "u1" holds
``round((x - offset) / scale)``: weights in [0, 1] quantised with scale 1/255
(error <= 1/510, below what an opacity or a pixel shows). "f4" is exact.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Sequence

import numpy as np

from jaxattn.analysis.weights import normalise_rows
from jaxattn.capture import Capture

FORMAT = "jaxattn.views/1"
VIEWS = ("head", "model", "neuron", "stats")
# How the page embeds the weights (no compute precision: that is `jaxattn.spec.PRECISIONS`).
EMBED_DTYPES = ("auto", "float32", "uint8")
# "auto" keeps weights exact up to this many values per example and kind
# ([L, H, T, T]: MiniLM's 72 heads at T = 120), then quantises them to uint8.
AUTO_EXACT_VALUES = 1 << 20


def encode_array(x: np.ndarray, dtype: str = "f4") -> dict:
    """One ARRAY of the module docstring (``"u1"`` only for values in [0, 1])."""
    x = np.asarray(x)
    if dtype == "u1":
        raw = np.rint(np.clip(x, 0.0, 1.0) * 255.0).astype(np.uint8)
        scale = 1.0 / 255.0
    elif dtype == "f4":
        raw = np.ascontiguousarray(x, dtype="<f4")
        scale = 1.0
    else:
        raise ValueError(f"unknown array dtype {dtype!r}; expected f4 or u1")
    data = base64.b64encode(zlib.compress(raw.tobytes(), 3)).decode("ascii")
    return dict(dtype=dtype, shape=list(x.shape), scale=scale, offset=0.0, b64=data)


def decode_array(a: dict) -> np.ndarray:
    """The inverse of `encode_array` (float32), as the browser decodes it."""
    raw = zlib.decompress(base64.b64decode(a["b64"]))
    x = np.frombuffer(raw, dtype=np.uint8 if a["dtype"] == "u1" else "<f4")
    return (x.astype(np.float32) * np.float32(a["scale"]) + a["offset"]).reshape(a["shape"])


def view_weights(cap: Capture, kind: str) -> np.ndarray:
    """The [L, H, T, T] weights a view draws: α as captured, or ‖αf‖ with rows normalised.

    The same definition as `jaxattn.analysis.weights.capture_weights`.
    """
    if kind == "attention":
        return np.asarray(cap.array("attention"), np.float32)
    return normalise_rows(cap.array("alpha_fx_norm")).astype(np.float32)


def example_label(cap: Capture, index: int) -> str:
    """A short label for the example selector: its text without special tokens."""
    words = [t for t in cap.tokens if not (t.startswith(("[", "<")) and t.endswith(("]", ">")))]
    text = " ".join(words).replace(" ##", "").replace("Ġ", "")
    return f"{index + 1}: {text[:60]}{'…' if len(text) > 60 else ''}"


def needs(views: Sequence[str]) -> tuple[str, ...]:
    """The capture quantities the given views use (attention always)."""
    out = ["attention"]
    if set(views) & {"head", "model", "stats"}:
        out.append("alpha_fx_norm")
    if "neuron" in views:
        out += ["queries", "keys"]
    return tuple(out)


def check_views(views: Sequence[str]) -> tuple[str, ...]:
    """Validated view names, in `VIEWS` order.

    Raises:
      ValueError: an unknown or no view.
    """
    bad = [v for v in views if v not in VIEWS]
    if bad or not views:
        raise ValueError(f"unknown views {bad or '(none)'}; choose from {', '.join(VIEWS)}")
    return tuple(v for v in VIEWS if v in views)


def example(cap: Capture, index: int, views: Sequence[str], embed: str, label=None) -> dict:
    """The document entry of one capture (see the module docstring)."""
    if "attention" not in cap.tensors:
        raise ValueError("views need the 'attention' quantity (what=('attention', ...))")
    att = view_weights(cap, "attention")
    if embed == "auto":
        embed = "float32" if att.size <= AUTO_EXACT_VALUES else "uint8"
    code = "f4" if embed == "float32" else "u1"
    out = dict(
        label=label or example_label(cap, index),
        tokens=list(cap.tokens),
        sentence_b_start=cap.sentence_b_start,
        layers=[int(v) for v in cap.layers],
        heads=[int(v) for v in cap.heads],
        weights={"attention": encode_array(att, code)},
    )
    if "alpha_fx_norm" in cap.tensors:
        out["weights"]["norm"] = encode_array(view_weights(cap, "norm"), code)
    if "neuron" in views and {"queries", "keys"} <= set(cap.tensors):
        out["queries"] = encode_array(cap.array("queries"))
        out["keys"] = encode_array(cap.array("keys"))
    if "stats" in views:
        from jaxattn.views.stats import stats_document

        out["stats"] = stats_document(cap)
    return out


def build_payload(
    captures: Capture | Sequence[Capture],
    *,
    views: Sequence[str] = VIEWS,
    labels: Sequence[str] | None = None,
    embed: str = "auto",
    precision: str | None = None,
) -> dict:
    """The JSON document of the module docstring for one or more captures.

    Args:
      captures: one Capture or several (each becomes an example of the selector).
      views: which of `VIEWS` the document serves.
      labels: example names for the selector (default: the start of each text).
      embed: how the weights are embedded: "float32" (exact), "uint8" (1/255
        steps, 4x smaller) or "auto" (exact up to `AUTO_EXACT_VALUES` weights
        per example).
      precision: the name of `embed` before 0.3 (deprecated).

    Raises:
      ValueError: no capture, unknown views or precision, a capture without attention.
    """
    caps = [captures] if isinstance(captures, Capture) else list(captures)
    if not caps:
        raise ValueError("no capture to view")
    embed = precision if precision is not None else embed
    if embed not in EMBED_DTYPES:
        valid = ", ".join(EMBED_DTYPES)
        raise ValueError(f"unknown embed dtype {embed!r}; expected one of {valid}")
    views = check_views(views)
    if labels is not None and len(labels) != len(caps):
        raise ValueError(f"{len(labels)} labels for {len(caps)} captures")
    return dict(
        format=FORMAT,
        views=list(views),
        examples=[
            example(c, i, views, embed, labels[i] if labels else None) for i, c in enumerate(caps)
        ],
    )
