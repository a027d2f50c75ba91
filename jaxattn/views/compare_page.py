"""The side-by-side page of `jaxattn view --compare`: one self-contained HTML file.

The page (compare.js, on core.js's decoding) draws, for the chosen example,
layer and head: A's and B's U x U weights (white 0 to black 1), the difference
B - A (blue negative, white 0, red positive; the scale is symmetric, +-max|B - A|
of that head, shown on a colour bar) and an overview of every (layer, head)
coloured by a per-head summary (mean |B - A| over the cells, or the
Jensen-Shannon distance per row averaged: `jaxattn.views.compare`). Hovering a
cell or a row label in any panel outlines it in all three; clicking an overview
cell selects that head.

The data is packed as `jaxattn.views.page` packs the other views: a JSON header
(the labels of A and B, the token table, per example its token indices, layers,
heads, level, summaries and scales) and one deflate-raw section per example with
A's and B's weights (`payload.pack_array`: float32, or uint8 in 1/255 steps, so
a drawn difference is within 1/255 of the exact one; the summaries, scales and
hover values come from the exact weights).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from jaxattn.views.compare import QUANTITY_TITLES, Pair
from jaxattn.views.page import document, packed_body
from jaxattn.views.payload import AUTO_EXACT_PAGE_BYTES, EMBED_DTYPES, MAX_EXAMPLES, pack_array

FORMAT = "jaxattn.compare/1"
SCRIPTS = ("core.js", "compare.js")


def side_label(source: str, quantity: str, dtype: str, precision: str, model: str | None) -> str:
    """How the page names one side: source, quantity, output dtype, compute precision."""
    name = source.rstrip("/").rsplit("/", 1)[-1]
    where = source if not model or model in (source, name) else f"{source} ({model})"
    return f"{where} · {QUANTITY_TITLES[quantity]} · {dtype} · precision {precision}"


def _rounded(x: np.ndarray) -> list:
    return np.round(np.asarray(x, np.float64), 7).tolist()


def pack_pairs(pairs: Sequence[Pair], embed: str) -> tuple[dict, list[bytes]]:
    """(JSON header without sides, deflate-raw sections) of the paired examples."""
    if embed not in EMBED_DTYPES:
        raise ValueError(
            f"unknown embed dtype {embed!r}; expected one of {', '.join(EMBED_DTYPES)}"
        )
    if embed == "auto":
        size = sum(4 * (p.a.size + p.b.size) for p in pairs)
        embed = "float32" if size <= AUTO_EXACT_PAGE_BYTES else "uint8"
    code = "f4" if embed == "float32" else "u1"
    table: dict[str, int] = {}
    examples, sections = [], []
    for i, p in enumerate(pairs):
        section, arrays = bytearray(), {}
        for name, x in (("a", p.a), ("b", p.b)):
            arrays[name], raw = pack_array(x, code, keymajor=True)
            section += bytes(-len(section) % 4)
            arrays[name].update(at=len(section), nbytes=len(raw))
            section += raw
        z = zlib.compressobj(9, zlib.DEFLATED, -15, 8)
        sections.append(z.compress(bytes(section)) + z.flush())
        label = f"{i + 1}: {p.text[:60]}{'…' if len(p.text) > 60 else ''}"
        examples.append(dict(
            label=label, tokens=[table.setdefault(t, len(table)) for t in p.tokens],
            sentence_b_start=p.sentence_b_start, layers=list(p.layers), heads=list(p.heads),
            arrays=arrays, level=p.level,
            summary={"mean_abs": _rounded(p.mean_abs), "js": _rounded(p.js)},
            max_abs=_rounded(p.max_abs),
        ))  # fmt: skip
    header = dict(format=FORMAT, embed=embed, tokens=list(table), examples=examples)
    return header, sections


def build_compare_html(
    pairs: Sequence[Pair],
    labels: tuple[str, str],
    *,
    embed: str = "auto",
    title: str = "jaxattn compare",
    max_examples: int = MAX_EXAMPLES,
) -> str:
    """The self-contained HTML page comparing A and B (the module docstring).

    Args:
      pairs: the paired examples (`jaxattn.views.compare.pair_all`).
      labels: what A and B are, in words (`side_label`).
      embed: "float32", "uint8" or "auto" (float32 while the weights are at most
        `payload.AUTO_EXACT_PAGE_BYTES` float32 bytes in all).
      title: the page title.
      max_examples: refuse more pairs than this.

    Returns:
      The HTML text.

    Raises:
      ValueError: no pair, too many, or an unknown embed dtype.
    """
    if not pairs:
        raise ValueError("no example to compare")
    if len(pairs) > max_examples:
        raise ValueError(
            f"{len(pairs)} examples are over the page's cap of {max_examples}: compare fewer "
            "(--limit N), or raise the cap (--max-examples)"
        )
    header, sections = pack_pairs(pairs, embed)
    header["sides"] = list(labels)
    body = packed_body(header, sections, title=title, mount="JaxattnCompare.mount")
    return document(body, title=title, scripts=SCRIPTS)
