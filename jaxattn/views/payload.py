"""Captures -> the JSON document every view draws from (numpy only).

The document (``build_payload(...)``) is what the web viewer's ``/api/view`` answers::

    {"format": "jaxattn.views/1", "views": ["head", ...],
     "examples": [{"label", "tokens", "sentence_b_start", "generated_start", "layers",
                   "heads", "causal",
                   "weights": {"attention": ARRAY, "norm": ARRAY},   # [L, H, T, T]
                   "queries": ARRAY,                                 # [L, H, T, K]
                   "keys": ARRAY, "kv_heads": [g, ...],              # [L, G, T, K]
                   "kv_groups": {"heads": [kv, ...], "of": H_kv} | null,
                   "stats": {...}}]}                                 # see `stats.py`

``generated_start`` is the first token a decoder generated after the prompt
(`Capture.generated_start`), or null: the head and model views mark it.
A decoder's example has ``causal`` true (`is_causal`): query i sees keys j <= i only,
and its weights are exactly 0 for j > i (`view_weights` zeroes them), so nothing is
drawn there. ``keys`` hold the capture's G key heads (G = H, or H_kv of a grouped-query
model); ``kv_heads[h]`` is the key head (an index into keys' second axis) that query
head index h reads: h // (H / G) (`kv_heads`). ``kv_groups`` names them as the model
does, for the labels (null without grouped-query attention: `kv_groups`).

An ARRAY is ``{"dtype": "f4" | "u1", "shape", "scale", "offset", "b64"}``: the
little-endian bytes, zlib-compressed, base64-encoded; the browser inflates them
with ``DecompressionStream("deflate")`` (zlib format). "u1" holds
``round((x - offset) / scale)``: weights in [0, 1] quantised with scale 1/255
(error <= 1/510, below what an opacity or a pixel shows). "f4" is exact.

The HTML page (`jaxattn.views.page`) embeds the same examples packed smaller
(`pack_page`): a plain JSON header (labels, layers, heads, one table of the
distinct tokens of all examples, each example's tokens as indices into it) and,
per example, one deflate-raw section of its arrays and stats JSON, inflated in
the page with ``DecompressionStream("deflate-raw")`` when the example is shown.
With embed "uint8" (and "auto" once the page's float32 data is over
`AUTO_EXACT_PAGE_BYTES`) the precision loss is:

- weights α and ‖αf‖ (rows normalised), in [0, 1]: uint8 in steps of 1/255,
  absolute error <= 1/510 (stored key-major, which deflates ~10% smaller);
- queries and keys: per head (one layer and head, T x K values) a float16
  step s >= max|head| / 31 (the next float16 up) and integers in [-31, 31]:
  absolute error <= s / 2, about max|head| / 62 (1.6% of the head's largest value).

Sections up to `LEVEL9_BYTES` deflate at level 9, larger ones at level 7 (level 9
takes ~10 s on a 512-token example's 38 MB for 4% less), a long example's at level 6.
"float32" keeps all exact (also a row step over float16's range); tokens are shown
as `analysis.display_token`.

A LONG example (`long_maps.is_long`: over 2,048 tokens, or maps over 64 MiB) holds no
[L, H, T, T] array:
each weight kind is its band [L, H, T, W] (desc "band": [first, last] key offsets
j - i, rows kept row-major) and "pooled:KIND" its maps max-pooled to
`long_maps.POOL`; its stats JSON is `segments.segments_document`'s
(statistics along the text), computed in the same pass over each head's map, and
"first:KIND" [L, H, T] is each query's weight on the first token.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Sequence

import numpy as np

from jaxattn.analysis.tokens import display_tokens, readable_text
from jaxattn.analysis.weights import KINDS, WEIGHT_KINDS, normalise_rows
from jaxattn.capture import Capture, capture_list
from jaxattn.errors import UsageError
from jaxattn.views.causal import causal_mask, is_causal
from jaxattn.views.long_maps import band_offsets, is_long, long_arrays

FORMAT = "jaxattn.views/1"
VIEWS = ("head", "model", "neuron", "stats")
# How the page embeds the weights (no compute precision: that is `jaxattn.spec.PRECISIONS`).
EMBED_DTYPES = ("auto", "float32", "uint8")
# "auto" keeps weights exact up to this many values per example and kind, then uint8.
AUTO_EXACT_VALUES = 1 << 20
AUTO_EXACT_PAGE_BYTES = 1 << 20  # the page with "auto" is exact up to this many float32 bytes
MAX_EXAMPLES = 200  # more are refused (a page holds every example in memory once shown)
QK_LEVELS = 31  # queries and keys: integers in [-31, 31] times the head's step
LEVEL9_BYTES = 8 << 20
PAGE_FORMAT = "jaxattn.views.page/1"


def kv_heads(cap: Capture) -> list[int]:
    """For each query head (an index into ``cap.heads``) the index of the key/value head
    it reads in ``cap.keys``: from ``cap.kv_heads`` (its position on the G axis), or,
    in a capture that predates that field, h // (H / G) over every head (h when G = H)."""
    if cap.kv_heads:
        axis = cap.key_value_heads
        return [axis.index(g) for g in cap.kv_heads]
    per = len(cap.heads) // cap.tensors["keys"].shape[1]
    return [h // per for h in range(len(cap.heads))]


def kv_groups(cap: Capture) -> dict | None:
    """A grouped-query capture's key/value heads as the model numbers them, for the
    labels: ``{"heads": [the key/value head each query head of cap.heads reads],
    "of": H_kv}`` (H_kv the model's, from the provenance: its ``num_key_value_heads``,
    which a capture through a server has too, or, in a file that predates it, its
    config's; None where the capture does not say), or None when each query head has
    keys of its own. Unlike
    `kv_heads` (positions on the capture's G axis), these stay the model's numbers
    in a capture of some heads (`--heads 3` of 4 reading 2: key/value head 1 of 2)."""
    if cap.kv_heads:
        prov = cap.provenance
        of = prov.get("num_key_value_heads") or (prov.get("config") or {}).get("num_kv_heads")
        return dict(heads=[int(g) for g in cap.kv_heads], of=int(of) if of else None)
    g = cap.tensors["keys"].shape[1]
    if g == len(cap.heads):
        return None
    return dict(heads=kv_heads(cap), of=g)  # a file before kv_heads: every head captured


def query_head_keys(cap: Capture) -> np.ndarray:
    """keys [L, H, T, K] per query head: a grouped-query capture's [L, G, T, K] with each
    query head given the key/value head it reads (`kv_heads`)."""
    keys = cap.array("keys")
    if keys.shape[1] == len(cap.heads) and not cap.kv_heads:
        return keys
    return keys[:, kv_heads(cap)]


def encode_array(x: np.ndarray, dtype: str = "f4") -> dict:
    """One ARRAY of the module docstring (``"u1"`` only for values in [0, 1])."""
    x = np.asarray(x)
    if dtype not in ("u1", "f4"):
        raise UsageError(f"unknown array dtype {dtype!r}; expected f4 or u1")
    u1 = dtype == "u1"
    raw = np.rint(np.clip(x, 0.0, 1.0) * 255.0).astype(np.uint8) if u1 else x.astype("<f4")
    scale = 1.0 / 255.0 if u1 else 1.0
    data = base64.b64encode(zlib.compress(raw.tobytes(), 3)).decode("ascii")
    return dict(dtype=dtype, shape=list(x.shape), scale=scale, offset=0.0, b64=data)


def decode_array(a: dict) -> np.ndarray:
    """The inverse of `encode_array` (float32), as the browser decodes it."""
    raw = zlib.decompress(base64.b64decode(a["b64"]))
    x = np.frombuffer(raw, dtype=np.uint8 if a["dtype"] == "u1" else "<f4")
    return (x.astype(np.float32) * np.float32(a["scale"]) + a["offset"]).reshape(a["shape"])


def view_weights(cap: Capture, kind: str) -> np.ndarray:
    """The [L, H, T, T] weights a view draws: α, or ‖αf‖ rows normalised (as capture_weights);
    a decoder's (`is_causal`) exactly 0 for j > i, the rows normalised over j <= i."""
    k = KINDS[kind]
    x = np.asarray(cap.array(k.quantity), np.float32)
    if is_causal(cap):
        x = np.where(causal_mask(x.shape[-1]), x, np.float32(0))
    return normalise_rows(x).astype(np.float32) if k.normalised else x


def example_label(cap: Capture, index: int) -> str:
    """A short label for the example selector: its text without special tokens (a
    prompt and its generated continuation joined by ▸)."""
    g = cap.generated_start
    text = readable_text(cap.tokens)
    if g is not None:
        text = f"{readable_text(cap.tokens[:g])} ▸ {readable_text(cap.tokens[g:])}"
    return f"{index + 1}: {text[:60]}{'…' if len(text) > 60 else ''}"


def needs(views: Sequence[str]) -> tuple[str, ...]:
    """The capture quantities the given views use (attention always)."""
    out = ["attention"]
    if set(views) & {"head", "model", "stats"}:
        out.append(WEIGHT_KINDS["norm"])
    if "neuron" in views:
        out += ["queries", "keys"]
    return tuple(out)


def check_views(views: str | Sequence[str]) -> tuple[str, ...]:
    """Validated view names, in `VIEWS` order; one name alone is that view (UsageError:
    an unknown or no view)."""
    views = (views,) if isinstance(views, str) else tuple(views)
    bad = [v for v in views if v not in VIEWS]
    if bad or not views:
        raise UsageError(f"unknown views {bad or '(none)'}; choose from {', '.join(VIEWS)}")
    return tuple(v for v in VIEWS if v in views)


def check_examples(count: int, max_examples: int) -> None:
    """UsageError for a page of no example or of more than `max_examples`."""
    if not count:
        raise UsageError("no capture to view")
    if count > max_examples:
        raise UsageError(
            f"{count} examples are over the page's cap of {max_examples}: view fewer, or "
            f"raise the cap with max_examples={count} (jaxattn view --max-examples)"
        )


def check_request(captures, views, labels, embed, max_examples):
    """(captures as a list, validated views, embed) of a document request, or UsageError."""
    caps = capture_list(captures, "the view page")
    check_examples(len(caps), max_examples)
    if embed not in EMBED_DTYPES:
        valid = ", ".join(EMBED_DTYPES)
        raise UsageError(f"unknown embed dtype {embed!r}; expected one of {valid}")
    views = check_views(views)
    if isinstance(labels, str):  # its letters were counted as labels
        raise UsageError(f"labels must be a list of names, one per capture, got {labels!r}")
    if labels is not None and len(labels) != len(caps):
        raise UsageError(f"{len(labels)} labels for {len(caps)} captures")
    return caps, views, embed


def check_attention(cap: Capture) -> None:  # noqa: D103
    if "attention" not in cap.tensors:
        raise UsageError("views need the 'attention' quantity (what=('attention', ...))")
    if not cap.length:
        raise UsageError("the capture has no tokens: capture a non-empty text")
    cap.check_full_maps("the view page")


def example(cap: Capture, index: int, views: Sequence[str], embed: str, label=None) -> dict:
    """The document entry of one capture (see the module docstring)."""
    check_attention(cap)
    att = view_weights(cap, "attention")
    if embed == "auto":
        embed = "float32" if att.size <= AUTO_EXACT_VALUES else "uint8"
    code = "f4" if embed == "float32" else "u1"
    out = dict(
        label=label or example_label(cap, index),
        tokens=display_tokens(cap.tokens),
        sentence_b_start=cap.sentence_b_start,
        generated_start=cap.generated_start,
        layers=[int(v) for v in cap.layers],
        heads=[int(v) for v in cap.heads],
        causal=is_causal(cap),
        weights={"attention": encode_array(att, code)},
    )
    if WEIGHT_KINDS["norm"] in cap.tensors:
        out["weights"]["norm"] = encode_array(view_weights(cap, "norm"), code)
    if "neuron" in views and {"queries", "keys"} <= set(cap.tensors):
        out["queries"] = encode_array(cap.array("queries"))
        out["keys"] = encode_array(cap.array("keys"))
        out["kv_heads"] = kv_heads(cap)
        out["kv_groups"] = kv_groups(cap)
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
    max_examples: int = MAX_EXAMPLES,
) -> dict:
    """The JSON document of the module docstring for one or more captures.

    Args:
      captures: one Capture or several (each becomes an example of the selector).
      views: which of `VIEWS` the document serves.
      labels: example names for the selector (default: the start of each text).
      embed: how the weights are embedded: "float32" (exact), "uint8" (1/255
        steps, 4x smaller) or "auto" (exact up to `AUTO_EXACT_VALUES` weights
        per example).
      max_examples: refuse more captures than this (`MAX_EXAMPLES`).

    Raises:
      UsageError: no capture, unknown views or embed dtype, an empty capture or one
        without attention, over `max_examples` captures.
    """
    caps, views, embed = check_request(captures, views, labels, embed, max_examples)
    return dict(
        format=FORMAT,
        views=list(views),
        examples=[
            example(c, i, views, embed, labels[i] if labels else None) for i, c in enumerate(caps)
        ],
    )


def head_steps(x: np.ndarray) -> np.ndarray | None:
    """Float16 steps s >= max|x[..., :, :]| / QK_LEVELS (None if one is over float16's range)."""
    need = np.abs(x).max((-2, -1)).astype(np.float64) / QK_LEVELS
    with np.errstate(over="ignore"):  # an overflow is reported as None
        steps = need.astype(np.float16)
    low = steps.astype(np.float64) < need
    steps[low] = np.nextafter(steps[low], np.float16(np.inf))
    return steps if np.isfinite(steps).all() else None


def pack_array(x: np.ndarray, code: str, keymajor: bool = False) -> tuple[dict, bytes]:
    """(descriptor, bytes) of one array of a page section: code "f4", "u1" or "i1" (the module
    docstring); keymajor: the last two axes stored swapped (the page swaps them back)."""
    x = np.asarray(x, np.float32)
    desc = dict(dtype=code, shape=list(x.shape), keymajor=keymajor)
    steps = head_steps(x) if code == "i1" else None
    if code == "i1" and steps is None:
        desc["dtype"] = code = "f4"
    body = np.ascontiguousarray(x.swapaxes(-1, -2)) if keymajor else x
    if code == "u1":
        raw = np.rint(np.clip(body, 0.0, 1.0) * 255.0).astype(np.uint8).tobytes()
        desc["scale"] = 1.0 / 255.0
    elif code == "i1":
        div = np.where(steps > 0, steps, 1).astype(np.float64)[..., None, None]
        ints = np.rint(x / div).astype(np.int8)
        raw = steps.astype("<f2").tobytes() + ints.tobytes()
    else:
        raw = body.astype("<f4").tobytes()
    return desc, raw


def unpack_array(desc: dict, section: bytes) -> np.ndarray:
    """The inverse of `pack_array` (float32), as the page decodes it; desc["at"] is its offset."""
    shape, at = desc["shape"], desc["at"]
    n = int(np.prod(shape))
    if desc["dtype"] == "i1":
        heads = n // (shape[-1] * shape[-2])
        steps = np.frombuffer(section, "<f2", heads, at).astype(np.float32)
        ints = np.frombuffer(section, np.int8, n, at + 2 * heads).astype(np.float32)
        return (ints.reshape(heads, -1) * steps[:, None]).reshape(shape)
    if desc["dtype"] == "u1":
        x = np.frombuffer(section, np.uint8, n, at).astype(np.float32) * np.float32(desc["scale"])
    else:
        x = np.frombuffer(section, "<f4", n, at).astype(np.float32)
    if desc["keymajor"]:
        return x.reshape(*shape[:-2], shape[-1], shape[-2]).swapaxes(-1, -2)
    return x.reshape(shape)


def _row_visitor(cap: Capture, kind: str, causal: bool, rows: dict):
    """A `long_maps.long_arrays` visitor keeping each head's `segments.row_statistics` in
    `rows` by (kind, layer, head), so a long map is read once for the page."""
    from jaxattn.views.segments import row_statistics

    def visit(li: int, hi: int, w: np.ndarray) -> None:
        rows[kind, cap.layers[li], cap.heads[hi]] = row_statistics(w, causal)

    return visit


def pack_example(cap: Capture, views, exact: bool, label: str, table: dict) -> tuple[dict, bytes]:
    """(header entry, raw section) of one capture of the page; `table` maps token -> index."""
    check_attention(cap)
    kinds = [k for k in KINDS if KINDS[k].quantity in cap.tensors]
    long, causal = is_long(cap), is_causal(cap)
    arrays, extra, rows = {}, {}, {}
    for kind in kinds:  # a long example: its bands and pooled maps (`long_maps`)
        if long:
            visit = _row_visitor(cap, kind, causal, rows) if "stats" in views else None
            got = long_arrays(cap, kind, causal, visit)
            arrays[kind], arrays[f"pooled:{kind}"] = got["band"], got["pooled"]
            arrays[f"first:{kind}"] = got["first"]
            extra[kind] = dict(band=list(band_offsets(causal)))
        else:
            arrays[kind] = view_weights(cap, kind)
    grouped = "neuron" in views and {"queries", "keys"} <= set(cap.tensors)
    if grouped:
        arrays.update(queries=cap.array("queries"), keys=cap.array("keys"))
    section, descs = bytearray(), {}
    for name, x in arrays.items():
        weights = name.split(":")[-1] in KINDS
        keymajor = weights and name in KINDS and name not in extra  # a band's rows stay rows
        code = "f4" if exact else "u1" if weights else "i1"
        descs[name], raw = pack_array(x, code, keymajor)
        section += bytes(-len(section) % 4)  # float32 views need 4-byte offsets
        descs[name].update(at=len(section), nbytes=len(raw), **extra.get(name, {}))
        section += raw
    if "stats" in views:
        if long:  # Clark et al.'s statistics, Kovaleva's classes: O(T²) float64 arrays
            from jaxattn.views.segments import segments_document

            doc = segments_document(cap, rows=rows)
        else:
            from jaxattn.views.stats import stats_document

            doc = stats_document(cap)
        text = json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()
        descs["stats"] = dict(at=len(section), nbytes=len(text))
        section += text
    entry = dict(
        label=label,
        tokens=[table.setdefault(t, len(table)) for t in display_tokens(cap.tokens)],
        sentence_b_start=cap.sentence_b_start,
        generated_start=cap.generated_start,
        layers=[int(v) for v in cap.layers],
        heads=[int(v) for v in cap.heads],
        causal=is_causal(cap),
        arrays=descs,
    )
    if grouped:
        entry["kv_heads"] = kv_heads(cap)
        entry["kv_groups"] = kv_groups(cap)
    return entry, bytes(section)


def pack_page(
    captures,
    *,
    views=VIEWS,
    labels=None,
    embed="auto",
    max_examples: int = MAX_EXAMPLES,
) -> tuple[dict, list[bytes]]:
    """The page's (JSON header, deflate-raw sections); `build_payload`'s arguments ("auto":
    exact up to `AUTO_EXACT_PAGE_BYTES` float32 bytes of arrays in all, else "uint8")."""
    caps, views, embed = check_request(captures, views, labels, embed, max_examples)
    names = needs(views)
    if embed == "auto":
        size = sum(4 * c.tensors[q].size for c in caps for q in names if q in c.tensors)
        embed = "float32" if size <= AUTO_EXACT_PAGE_BYTES else "uint8"
    table: dict[str, int] = {}
    examples, sections = [], []
    for i, cap in enumerate(caps):
        label = labels[i] if labels else example_label(cap, i)
        entry, raw = pack_example(cap, views, embed == "float32", label, table)
        # level 9 is slow on long examples' low-entropy bands (8x level 6's time for 3% less)
        level = 6 if is_long(cap) else 9 if len(raw) <= LEVEL9_BYTES else 7
        z = zlib.compressobj(level, zlib.DEFLATED, -15, 8)
        sections.append(z.compress(raw) + z.flush())
        examples.append(entry)
    header = dict(format=PAGE_FORMAT, views=list(views), tokens=list(table), examples=examples)
    return header, sections
