"""The global query-key map as one self-contained HTML file (numpy only).

The header of `jaxattn.views.qk_payload.pack_global` goes into ``<script
type="application/json" id="qk-data">`` with ``sections``: [first character, end
character, bytes] of each deflate-raw section in ``<script type="text/plain"
id="qk-bin">``, written in `jaxattn.views.page`'s 13-bit text (`encode_text`);
qk.js (with core.js's decoding) draws the grid of heads and the large scatter. The
caption and a loading notice are in the page itself, shown before any script has run.
"""

from __future__ import annotations

import html

from jaxattn import outfile
from jaxattn.progress import counted
from jaxattn.views.page import document, encode_text, script_json

SCRIPTS = ("core.js", "qk.js")


def build_global_html(header: dict, sections: list[bytes], *, title: str) -> str:
    """The page of one global map (`pack_global`'s header and sections)."""
    texts, spans, start = [], [], 0
    for raw in sections:
        texts.append(encode_text(raw))
        spans.append([start, start + len(texts[-1]), len(raw)])
        start += len(texts[-1])
    header = dict(header, sections=spans, title=title)
    body = (
        f'<h1 style="font:600 16px system-ui;margin:0 0 4px">{html.escape(title)}</h1>\n'
        f'<p class="jx info" id="qk-caption">{html.escape(caption(header))}</p>\n'
        f'<div id="qk" class="jx" data-state="loading"><div class="qk-loading" id="qk-loading" '
        f'role="status">{html.escape(loading(header))}</div></div>\n'
        f'<script type="application/json" id="qk-data">{script_json(header)}</script>\n'
        f'<script type="text/plain" id="qk-bin">{"".join(texts)}</script>\n'
        "<script>window.addEventListener('DOMContentLoaded', () => { const $ = (id) => "
        "document.getElementById(id); JaxattnQK.mount($('qk'), JSON.parse($('qk-data')"
        ".textContent), $('qk-bin').textContent); });</script>"
    )
    return document(body, title=title, scripts=SCRIPTS)


def caption(header: dict) -> str:
    """What the page shows, in words. It is written into the page, so it is read at once:
    the data is decoded and inflated only once the page has loaded (a 20 MB page: a
    second or so)."""
    layers, heads, model = len(header["layers"]), len(header["heads"]), header.get("model")
    return (
        f"The queries (blue) and keys (orange) of every head{f' of {model}' if model else ''}"
        f" ({counted(layers, 'layer')} x {counted(heads, 'head')}) over "
        f"{header['sampled']['sentences']:,} "
        "sentences, laid out in 2-D head by head after a normalisation that keeps the head's "
        "attention. The grid shows every head; click one to see it large. Hover a point for "
        "its token in its sentence; click it for that sentence's head view."
    )


def loading(header: dict) -> str:
    """The page's state until its first map is drawn (qk.js replaces it)."""
    points = 2 * header["points"]
    return f"Loading the maps: {points:,} points per head ..."


def write_global_html(path, header: dict, sections: list[bytes], *, title: str) -> int:
    """Write the page to `path` (UTF-8); returns its size in bytes."""
    text = build_global_html(header, sections, title=title)
    data = text.encode("utf-8")
    outfile.write_bytes(path, data)
    return len(data)
