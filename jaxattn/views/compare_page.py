"""The side-by-side page of `jaxattn view --compare`: one self-contained HTML file.

The page (compare.js, on core.js's decoding) draws, for the chosen example,
layer and head: A's and B's U x U weights (white 0 to black 1), the difference
B - A (blue negative, white 0, red positive; the scale is symmetric, +-max|B - A|
of that head, shown on a colour bar) and an overview of every (layer, head)
coloured by a per-head summary (mean |B - A| over the cells, or the
Jensen-Shannon distance per row averaged: `jaxattn.views.compare`). Hovering a
cell or a row label in any panel outlines it in all three; clicking an overview
cell selects that head. Two decoders' example (`Pair.causal`) draws its masked
future (j > i) grey and hatched in all three panels, as the model view greys it,
and says that a token sees only itself and earlier ones.

The data is packed as `jaxattn.views.page` packs the other views: a JSON header
(the labels of A and B, the token table, per example its token indices, layers,
heads, level, causal, summaries and scales, 7 significant digits) and one deflate-raw
section per example with A's and B's weights (`payload.pack_array`: float32, or
uint8 in 1/255 steps). With uint8 the section also holds the difference itself
(`pack_diff`), quantised per (layer, head) against that head's own scale
m = max|B - A|: integers q in [-127, 127] (an "i1" array with unit steps, as
core.js decodes it) and a float32 step s <= m / 127 per head ("d_step"), so the
drawn B - A = q s is within m / 254 of the exact one; a difference of two
rounded weights would be within 1/255 only, and 0 wherever A and B round alike.
With float32 the page subtracts the embedded weights. The summaries and scales
come from the exact weights.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from jaxattn.errors import UsageError
from jaxattn.views.compare import KIND_TITLES, Pair
from jaxattn.views.page import document, opening_example, packed_body
from jaxattn.views.payload import AUTO_EXACT_PAGE_BYTES, EMBED_DTYPES, MAX_EXAMPLES, pack_array

FORMAT = "jaxattn.compare/1"
SCRIPTS = ("core.js", "compare.js")


def side_label(source: str, kind: str, dtype: str, precision: str, model: str | None) -> str:
    """How the page names one side: source, weight kind, output dtype, compute precision."""
    name = source.rstrip("/").rsplit("/", 1)[-1]
    where = source if not model or model in (source, name) else f"{source} ({model})"
    return f"{where} · {KIND_TITLES[kind]} · {dtype} · precision {precision}"


DIFF_LEVELS = 127  # the embedded difference: integers in [-127, 127] times the head's step


def _rounded(x: np.ndarray) -> list:
    """`x` as nested lists of floats to 7 significant digits (tiny scales stay non-zero)."""
    x = np.asarray(x, np.float64)
    return np.array([float(f"{v:.7g}") for v in x.ravel()]).reshape(x.shape).tolist()


def pack_diff(d: np.ndarray) -> tuple[dict, bytes, dict, bytes]:
    """The difference [L, H, U, U] quantised per head (the module docstring).

    Returns:
      (descriptor, bytes) of the integers q ("i1" with unit float16 steps) and of
      the float32 steps s [L, H], the largest float32 <= max|d| / 127 of each head:
      |q s - d| <= max(s / 2, max|d| - 127 s) <= max|d| / 254.
    """
    d = np.asarray(d, np.float64)
    want = np.abs(d).max((-2, -1)) / DIFF_LEVELS
    steps = want.astype(np.float32)
    over = steps.astype(np.float64) > want
    steps[over] = np.nextafter(steps[over], np.float32(0))
    div = np.where(steps > 0, steps, 1).astype(np.float64)[..., None, None]
    q = np.clip(np.rint(d / div), -DIFF_LEVELS, DIFF_LEVELS).astype(np.int8)
    heads = int(np.prod(d.shape[:-2], dtype=int))
    raw = np.ones(heads, "<f2").tobytes() + q.tobytes()
    step_desc, step_raw = pack_array(steps, "f4")
    return dict(dtype="i1", shape=list(d.shape), keymajor=False), raw, step_desc, step_raw


def pack_pairs(pairs: Sequence[Pair], embed: str) -> tuple[dict, list[bytes]]:
    """(JSON header without sides, deflate-raw sections) of the paired examples."""
    if embed not in EMBED_DTYPES:
        raise UsageError(
            f"unknown embed dtype {embed!r}; expected one of {', '.join(EMBED_DTYPES)}"
        )
    if embed == "auto":
        size = sum(4 * (p.a.size + p.b.size) for p in pairs)
        embed = "float32" if size <= AUTO_EXACT_PAGE_BYTES else "uint8"
    code = "f4" if embed == "float32" else "u1"
    table: dict[str, int] = {}
    examples, sections = [], []
    for i, p in enumerate(pairs):
        section, arrays, parts = bytearray(), {}, []
        for name, x in (("a", p.a), ("b", p.b)):
            parts.append((name, *pack_array(x, code, keymajor=True)))
        if code == "u1":
            desc, raw, step_desc, step_raw = pack_diff(p.diff)
            parts += [("d", desc, raw), ("d_step", step_desc, step_raw)]
        for name, desc, raw in parts:
            section += bytes(-len(section) % 4)  # float32 arrays need 4-byte offsets
            arrays[name] = dict(desc, at=len(section), nbytes=len(raw))
            section += raw
        z = zlib.compressobj(9, zlib.DEFLATED, -15, 8)
        sections.append(z.compress(bytes(section)) + z.flush())
        label = f"{i + 1}: {p.text[:60]}{'…' if len(p.text) > 60 else ''}"
        examples.append(
            dict(
                label=label,
                tokens=[table.setdefault(t, len(table)) for t in p.tokens],
                sentence_b_start=p.sentence_b_start,
                layers=list(p.layers),
                heads=list(p.heads),
                arrays=arrays,
                level=p.level,
                causal=p.causal,
                summary={"mean_abs": _rounded(p.mean_abs), "js": _rounded(p.js)},
                max_abs=_rounded(p.max_abs),
            )
        )
    header = dict(format=FORMAT, embed=embed, tokens=list(table), examples=examples)
    return header, sections


def build_compare_html(
    pairs: Sequence[Pair],
    labels: tuple[str, str],
    *,
    embed: str = "auto",
    title: str = "jaxattn compare",
    max_examples: int = MAX_EXAMPLES,
    example: int = 0,
) -> str:
    """The self-contained HTML page comparing A and B (the module docstring).

    Args:
      pairs: the paired examples (`jaxattn.views.compare.pair_all`).
      labels: what A and B are, in words (`side_label`).
      embed: "float32", "uint8" or "auto" (float32 while the weights are at most
        `payload.AUTO_EXACT_PAGE_BYTES` float32 bytes in all).
      title: the page title.
      max_examples: refuse more pairs than this.
      example: the example the page opens at (negative: from the end).

    Returns:
      The HTML text.

    Raises:
      UsageError: no pair, too many, an unknown embed dtype, or an example out of
        range (`jaxattn.views.page.opening_example`).
    """
    if not pairs:
        raise UsageError("no example to compare")
    if len(pairs) > max_examples:
        raise UsageError(
            f"{len(pairs)} examples are over the page's cap of {max_examples}: compare fewer "
            "(--limit N), or raise the cap (--max-examples)"
        )
    start = opening_example(len(pairs), example)
    header, sections = pack_pairs(pairs, embed)
    header["sides"] = list(labels)
    header["start"] = {"example": start}  # compare.js opens there
    body = packed_body(header, sections, title=title, mount="JaxattnCompare.mount")
    return document(body, title=title, scripts=SCRIPTS)
