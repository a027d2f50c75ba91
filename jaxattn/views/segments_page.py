"""The stats-first page: per-head statistics along the text, as one self-contained HTML file.

For long documents (8,192 tokens and more): the page holds `segments.segments_document`
of each example (numbers per layer, head and segment) and its tokens, never a map, so
its size is bounded by the segments, not by T² (`page_bytes_bound`), and it opens at
once. It needs no map either: a capture of per-row statistics only
(``decoder_row_head_stats``, ``row_head_stats``) gives each head's segments but the
local share's, one of whole-text statistics (``decoder_head_stats``, ``head_stats``)
its whole-text values. The data is plain JSON in
``<script type="application/json" id="jaxattn-segments">``; segments.js draws it.

    from jaxattn.views import build_segments_html
    html = build_segments_html(cap)                 # or [cap_stats, cap_maps] of one text
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from jaxattn import outfile
from jaxattn.analysis.tokens import display_tokens
from jaxattn.capture import Capture, capture_list
from jaxattn.views.page import document, opening_example, script_json
from jaxattn.views.payload import MAX_EXAMPLES, check_examples, example_label
from jaxattn.views.segments import LOCAL, SEGMENT, segments_document

SCRIPTS = ("core.js", "model.js", "segments.js")


def group_by_text(captures: Sequence[Capture]) -> list[list[Capture]]:
    """Captures grouped into examples: consecutive captures of the same tokens are one
    example (a capture of statistics and one of some heads' maps, say)."""
    groups: list[list[Capture]] = []
    for cap in captures:
        if groups and groups[-1][0].tokens == cap.tokens:
            groups[-1].append(cap)
        else:
            groups.append([cap])
    return groups


FORMAT = "jaxattn.views.segments.page/1"


def statistics_captures(causal: bool) -> tuple[tuple[str, ...], ...]:
    """The captures of per-row statistics a text's page needs, one quantity each (each
    runs blockwise on a long text: `jaxattn.engine.blockwise.SERVES`, one kind of
    statistics a request): decoder_row_head_stats alone, whose sink, prev and entropy
    are either model's (an encoder's entropy over every real key of a row, as
    row_head_stats'). `causal` is the model's (the same one capture either way)."""
    return (("decoder_row_head_stats",),)


def segments_data(
    captures: Capture | Sequence[Capture],
    *,
    segment: int = SEGMENT,
    local: int = LOCAL,
    max_examples: int = MAX_EXAMPLES,
) -> dict:
    """The page's data, {format, examples: [{label, tokens, doc}]}, as segments.js's
    `mountSegments` draws it (the live viewer sends it as JSON). Arguments and errors
    as `build_segments_html`'s."""
    caps = capture_list(captures, "the stats-first page")
    groups = group_by_text(caps)
    check_examples(len(groups), max_examples)
    examples = [
        dict(
            label=example_label(group[0], i),
            tokens=display_tokens(group[0].tokens),
            doc=segments_document(group, segment=segment, local=local),
        )
        for i, group in enumerate(groups)
    ]
    return dict(format=FORMAT, examples=examples)


def build_segments_html(
    captures: Capture | Sequence[Capture],
    *,
    segment: int = SEGMENT,
    local: int = LOCAL,
    title: str = "jaxattn: statistics along the text",
    max_examples: int = MAX_EXAMPLES,
    example: int = 0,
) -> str:
    """The stats-first page of one or more examples.

    Args:
      captures: one Capture or several; consecutive captures of the same text are
        one example (`group_by_text`): each head's numbers come from a capture that
        holds its map, else from one that holds its statistics.
      segment: tokens a segment (default 64).
      local: the local share's window, in tokens (default 8).
      title: the page title.
      max_examples: refuse more examples than this.
      example: the example the page opens at (negative: from the end), counted in
        examples (`group_by_text`), not captures.

    Raises:
      UsageError: no capture, too many examples, a bad segment or window, a capture
        with neither maps nor statistics (`segments.segments_document`), an example
        out of range (`jaxattn.views.page.opening_example`).
    """
    data = segments_data(captures, segment=segment, local=local, max_examples=max_examples)
    data["start"] = {"example": opening_example(len(data["examples"]), example)}
    body = (
        f'<h1 style="font:600 16px system-ui;margin:0 0 4px">{html.escape(title)}</h1>\n'
        '<div id="jaxattn" data-state="loading"></div>\n'
        f'<script type="application/json" id="jaxattn-segments">{script_json(data)}</script>\n'
        "<script>window.addEventListener('DOMContentLoaded', () => { const $ = (id) => "
        "document.getElementById(id); JaxattnViews.mountSegments($('jaxattn'), "
        "JSON.parse($('jaxattn-segments').textContent)); });</script>"
    )
    return document(body, title=title, scripts=SCRIPTS)


def page_bytes_bound(tokens: Sequence[str], heads: int, segments: int, kinds: int = 2) -> int:
    """The most bytes the data of one example adds to the page (its scripts are fixed):
    the tokens' JSON (at most 6 bytes a character: `script_json`'s escapes, plus quotes
    and a comma; the label: 512), each segment's bounds (16
    bytes), and per weight kind and layer x head 4 statistics x (segments + 1)
    numbers of at most 13 characters (6 significant digits, "-1.23457e-05,"), a source
    name (32) and its lists' brackets, plus 2 KiB. Linear in T / segment, never in T²."""
    text = sum(6 * len(tok) + 3 for tok in tokens) + 512
    per_head = 4 * (segments + 1) * 13 + 4 * 4 + 32 + 16
    return text + 16 * segments + kinds * heads * per_head + 2048


def write_segments_html(path, captures, **options) -> None:
    """Write `build_segments_html(captures, **options)` to `path` (UTF-8)."""
    outfile.write_text(path, build_segments_html(captures, **options))
