"""One self-contained HTML file: the view scripts and styles inlined, the data embedded.

The file loads nothing: a Content-Security-Policy of ``default-src 'none'``
forbids every request (scripts and styles are inline, data is in the page), so
it opens from disk, in a notebook's iframe or behind a firewall alike.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from importlib import resources

from jaxattn.capture import Capture
from jaxattn.views.payload import VIEWS, build_payload

# core.js first: the others register their views on the object it creates.
SCRIPTS = ("core.js", "head.js", "model.js", "neuron.js", "stats.js")
STYLES = ("style.css",)

# The static file fetches nothing; the web viewer's page may call its own origin.
CSP_STATIC = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"
)
CSP_WEB = CSP_STATIC + "; connect-src 'self'; form-action 'self'"


def static_text(name: str) -> str:
    """The text of one file of jaxattn/views/static/."""
    folder = resources.files("jaxattn.views").joinpath("static")
    return folder.joinpath(name).read_text(encoding="utf-8")


def script_json(doc) -> str:
    """JSON that is safe inside a <script> element ("</script>" cannot end it)."""
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def document(
    body: str, *, title: str, scripts: Sequence[str] = SCRIPTS, csp: str = CSP_STATIC
) -> str:
    """An HTML page with the view styles and `scripts` inlined around `body`."""
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
    views: Sequence[str] = VIEWS,
    labels: Sequence[str] | None = None,
    embed: str = "auto",
    title: str = "jaxattn views",
    precision: str | None = None,
) -> str:
    """The self-contained HTML of the given views over one or more captures.

    Args:
      captures: one Capture or several (an example selector switches between them).
      views: which of "head", "model", "neuron", "stats" to include (tabs).
      labels: example names for the selector.
      embed: weights embedded as "float32", "uint8" or "auto" (see `build_payload`).
      title: the page title.
      precision: the name of `embed` before 0.3 (deprecated).

    Returns:
      The HTML text (write it with ``open(path, "w", encoding="utf-8")``).

    Raises:
      ValueError: as `jaxattn.views.payload.build_payload`.
    """
    doc = build_payload(captures, views=views, labels=labels, embed=embed, precision=precision)
    body = (
        f'<h1 style="font:600 16px system-ui;margin:0 0 4px">{html.escape(title)}</h1>\n'
        '<div id="jaxattn"></div>\n'
        f'<script type="application/json" id="jaxattn-data">{script_json(doc)}</script>\n'
        "<script>window.addEventListener('DOMContentLoaded', () => JaxattnViews.mount("
        "document.getElementById('jaxattn'), "
        "JSON.parse(document.getElementById('jaxattn-data').textContent)));</script>"
    )
    return document(body, title=title)


def write_html(path, captures: Capture | Sequence[Capture], **options) -> None:
    """Write `build_html(captures, **options)` to `path` (UTF-8)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(build_html(captures, **options))


class View:
    """Views of captures for a notebook: Jupyter shows it through `_repr_html_`.

        from jaxattn.views import View
        View(caps, views=("head", "neuron"))     # last expression of a cell

    The page goes into a sandboxed iframe (``srcdoc``), so its scripts and ids
    cannot clash with the notebook's.
    """

    def __init__(self, captures, *, height: int = 720, **options):
        self.html = build_html(captures, **options)
        self.height = height

    def _repr_html_(self) -> str:
        return (
            f'<iframe srcdoc="{html.escape(self.html, quote=True)}" '
            f'style="width:100%;height:{self.height}px;border:1px solid #ddd" '
            'sandbox="allow-scripts"></iframe>'
        )

    def save(self, path) -> None:
        """Write the page to `path`."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.html)
