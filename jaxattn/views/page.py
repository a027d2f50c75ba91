"""One self-contained HTML file: the view scripts and styles inlined, the data embedded.

The file loads nothing: a Content-Security-Policy of ``default-src 'none'``
forbids every request (scripts and styles are inline, data is in the page), so
it opens from disk, in a notebook's iframe or behind a firewall alike.

The data is `jaxattn.views.payload.pack_page`'s: its JSON header in
``<script type="application/json" id="jaxattn-data">`` and the examples'
deflate-raw sections, one after the other, in ``<script type="text/plain"
id="jaxattn-bin">`` as text of `ALPHABET` (printable ASCII without ``<``, ``>``
and ``&``): each 13 bits (big-endian, the last group zero-padded) as two
characters, ``a * 91 + b``, 16/13 of the bytes (base64: 4/3). Each example's
``section`` is ``[first character, end character, bytes]``; core.js decodes it
and inflates it with ``DecompressionStream("deflate-raw")`` (built into the
browser; no request, so the CSP allows it) when the example is shown.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from importlib import resources

import numpy as np

from jaxattn import outfile
from jaxattn.capture import Capture
from jaxattn.errors import UsageError
from jaxattn.selection import is_int, out_of_range
from jaxattn.views.causal import default_query
from jaxattn.views.drawing import LONE_SURROGATE, encodable
from jaxattn.views.long_maps import POOL, band_offsets
from jaxattn.views.payload import MAX_EXAMPLES, VIEWS, pack_page

# core.js first: the others register their views on the object it creates.
SCRIPTS = ("core.js", "head.js", "model.js", "neuron.js", "segments.js", "stats.js")
STYLES = ("style.css",)

# The static file fetches nothing; the web viewer's page may call its own origin.
CSP_STATIC = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"
)
CSP_WEB = CSP_STATIC + "; connect-src 'self'; form-action 'self'"
# The 91 characters of the embedded binary text (core.js builds the same).
ALPHABET = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in "<>&")


def encode_text(data: bytes) -> str:
    """`data` as text of `ALPHABET`: 13 bits per two characters (the module docstring)."""
    # 13 bytes = 8 groups: 0-3 from bytes 0-7 (bits 0-63), 4-7 from bytes 5-12 (bits 40-103)
    n = len(data)
    rows = np.frombuffer(data + bytes(-n % 13), np.uint8).reshape(-1, 13)
    hi = np.ascontiguousarray(rows[:, :8]).view(">u8").astype(np.uint64)
    lo = np.ascontiguousarray(rows[:, 5:]).view(">u8").astype(np.uint64)
    shifts = np.array([51, 38, 25, 12], np.uint64)
    groups = np.concatenate([hi >> shifts, lo >> (shifts - np.uint64(12))], 1) & np.uint64(8191)
    groups = groups.ravel()[: -(-8 * n // 13)].astype(np.int32)
    chars = np.stack([groups // 91, groups % 91], -1).ravel()
    return np.frombuffer(ALPHABET.encode("ascii"), np.uint8)[chars].tobytes().decode("ascii")


def decode_text(text: str, nbytes: int) -> bytes:
    """The inverse of `encode_text`: the first `nbytes` bytes."""
    index = np.zeros(128, np.int32)
    index[np.frombuffer(ALPHABET.encode("ascii"), np.uint8)] = np.arange(len(ALPHABET))
    pairs = index[np.frombuffer(text.encode("ascii"), np.uint8)].reshape(-1, 2)
    groups = pairs[:, 0] * 91 + pairs[:, 1]
    bits = (groups[:, None] >> np.arange(12, -1, -1)) & 1
    return np.packbits(bits.astype(np.uint8).ravel())[:nbytes].tobytes()


def static_text(name: str) -> str:
    """The text of one file of jaxattn/views/static/."""
    folder = resources.files("jaxattn.views").joinpath("static")
    return folder.joinpath(name).read_text(encoding="utf-8")


def script_json(doc) -> str:
    """JSON that is safe inside a <script> element ("</script>" cannot end it) and in
    UTF-8 (a lone surrogate is written as its escape, as JSON.parse reads it back)."""
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    text = text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return LONE_SURROGATE.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


def document(
    body: str, *, title: str, scripts: Sequence[str] = SCRIPTS, csp: str = CSP_STATIC
) -> str:
    """An HTML page with the view styles and `scripts` inlined around `body`; a lone
    surrogate in its text (a title, a label) as U+FFFD (`drawing.encodable`)."""
    title, body = encodable(title), encodable(body)
    css = "\n".join(static_text(s) for s in STYLES)
    js = "\n".join(static_text(s) for s in scripts)
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n<style>\nbody {{ margin: 12px 16px; }}\n{css}\n"
        f"</style></head>\n<body>\n{body}\n<script>\n{js}\n</script>\n</body></html>\n"
    )


def build_html(
    captures: Capture | Sequence[Capture],
    *,
    views: str | Sequence[str] = VIEWS,
    labels: Sequence[str] | None = None,
    embed: str = "auto",
    title: str = "jaxattn views",
    max_examples: int = MAX_EXAMPLES,
    example: int = 0,
    token: int | None = None,
) -> str:
    """The self-contained HTML of the given views over one or more captures.

    Args:
      captures: one Capture or several (an example selector switches between them).
      views: which of "head", "model", "neuron", "stats" to include (tabs); one
        name alone is that view.
      labels: example names for the selector.
      embed: "float32" (exact), "uint8" (weights in steps of 1/255, queries and keys
        in 63 steps per row; the precision is in `jaxattn.views.payload`) or "auto"
        (exact up to `payload.AUTO_EXACT_PAGE_BYTES` float32 bytes in all, else uint8).
      title: the page title.
      max_examples: refuse more captures than this (default `payload.MAX_EXAMPLES`).
      example: the example the page opens at (negative: from the end).
      token: the neuron view's query token it opens at, a position of that example
        (None: `jaxattn.views.causal.default_query`, a decoder's last token, else 0).

    Returns:
      The HTML text (write it with ``open(path, "w", encoding="utf-8")``).

    Raises:
      UsageError: as `jaxattn.views.payload.build_payload`; an example or token out
        of range (`opening`).
    """
    header, sections = pack_page(
        captures,
        views=views,
        labels=labels,
        embed=embed,
        max_examples=max_examples,
    )
    caps = [captures] if isinstance(captures, Capture) else list(captures)
    drawn = token if "neuron" in header["views"] else None
    start, token = opening(caps, example, drawn)
    header["start"] = {"example": start, "token": token}  # core.js and neuron.js read it
    mount = "(root, header, text) => JaxattnViews.mount(root, JaxattnViews.unpack(header, text))"
    return document(packed_body(header, sections, title=title, mount=mount), title=title)


def opening(
    captures: Sequence[Capture], example, token, holder: str = "the page"
) -> tuple[int, int]:
    """(example index, query token) of `captures` that a view opens at or draws: `example`
    and `token` (a position of that example; None: its `default_query`, a decoder's last
    token, else 0) counted from the end
    when negative (token -1: the last, a decoder's last generated token). UsageError
    names a bad one: "example 7: index 7 is out of range: {holder} holds 2 examples
    (...)", "token 9: the example has 7 tokens (0..6, or -7..-1)"."""
    index = opening_example(len(captures), example, holder)
    if token is not None and not is_int(token):
        raise UsageError(f"token must be an index (a whole number), got {token!r}")
    length = captures[index].length
    if token is not None and not -length <= token < length:
        raise UsageError(
            f"token {token}: the example has {length} tokens (0..{length - 1}, or -{length}..-1)"
        )
    return index, default_query(captures[index]) if token is None else int(token) % length


def opening_example(n: int, example, holder: str = "the page") -> int:
    """The index of `example` (negative: from the end) among `n` examples a page opens
    at; UsageError as `opening`'s: "example 7: index 7 is out of range: {holder} holds
    2 examples (...)"."""
    if not is_int(example):
        raise UsageError(f"example must be an index (a whole number), got {example!r}")
    if not -n <= example < n:
        raise UsageError(f"example {example}: {out_of_range(example, n, holder)}")
    return int(example) % n


def packed_body(header: dict, sections: Sequence[bytes], *, title: str, mount: str) -> str:
    """The body of a page of packed data (the module docstring): the title, the root
    element, `header` with each example's "section" set, the sections as text, and a
    script calling the JS function `mount(root, header, text)` once the page is loaded."""
    texts, start = [], 0
    for entry, section in zip(header["examples"], sections, strict=True):
        texts.append(encode_text(section))
        entry["section"] = [start, start + len(texts[-1]), len(section)]
        start += len(texts[-1])
    return (
        f'<h1 style="font:600 16px system-ui;margin:0 0 4px">{html.escape(title)}</h1>\n'
        '<div id="jaxattn"></div>\n'
        f'<script type="application/json" id="jaxattn-data">{script_json(header)}</script>\n'
        f'<script type="text/plain" id="jaxattn-bin">{"".join(texts)}</script>\n'
        "<script>window.addEventListener('DOMContentLoaded', () => { const $ = (id) => "
        f"document.getElementById(id); ({mount})($('jaxattn'), JSON.parse("
        "$('jaxattn-data').textContent), $('jaxattn-bin').textContent); });</script>"
    )


def long_page_bound(
    tokens, maps: int, qk_values: int = 0, stats_values: int = 0, causal=False
) -> int:
    """The most bytes a long example of `tokens` adds to a uint8 page, for `maps` maps
    (layers x heads x weight kinds), `qk_values` query and key values and
    `stats_values` numbers of its statistics (`segments`): each map's pooled square,
    band and first-token column, a byte a query/key value (and a float16 step a
    head), 13 bytes a statistic, raised by deflate's worst case (5 bytes a 16 KiB
    block) and the page's text encoding (16/13: `encode_text`); the JSON of its
    distinct tokens, 7 bytes a token's index, and 16 KiB for the rest of the header.
    Linear in T, never T² (docs/views.md)."""
    t = len(tokens)
    first, last = band_offsets(causal)
    pool = POOL * POOL
    raw = maps * (pool + t * (last - first + 2) + 8) + qk_values * 1.01
    raw += 13 * stats_values + 4
    deflated = raw + 5 * (raw // 16384 + 1) + 16
    text = sum(len(script_json(tok).encode()) + 1 for tok in set(tokens)) + 7 * t
    return int(deflated * 16 / 13) + text + 16 * 1024


def write_html(path, captures: Capture | Sequence[Capture], **options) -> None:
    """Write `build_html(captures, **options)` to `path` (UTF-8)."""
    outfile.write_text(path, build_html(captures, **options))


class View:
    """Views of captures for a notebook: Jupyter shows it through `_repr_html_`.

        from jaxattn.views import View
        View(caps, views=("head", "neuron"))     # last expression of a cell

    The page goes into a sandboxed iframe (``srcdoc``), so its scripts and ids
    cannot clash with the notebook's, nor with another View's. The frame is
    white: a frame is transparent, and on a dark notebook theme (JupyterLab
    Dark, VS Code) the page's dark text would sit on the dark background.
    """

    def __init__(self, captures, *, height: int = 720, **options):
        """`captures` and `options` as `build_html`'s; `height`: the frame's, in pixels.

        Raises:
          UsageError: as `build_html`, or a height that is no positive number of pixels.
        """
        if not is_int(height) or height < 1:  # "600px" drew a frame of "600pxpx"
            raise UsageError(f"height must be a positive number of pixels, got {height!r}")
        self.html = build_html(captures, **options)
        self.height = height

    def _repr_html_(self) -> str:
        return (
            f'<iframe srcdoc="{html.escape(self.html, quote=True)}" '
            f'style="width:100%;height:{self.height}px;border:1px solid #ddd;background:#fff" '
            'sandbox="allow-scripts"></iframe>'
        )

    def save(self, path) -> None:
        """Write the page to `path`."""
        outfile.write_text(path, self.html)
