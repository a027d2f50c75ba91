"""Views of captures: head, model, neuron and stats views in one self-contained HTML file.

Numpy only on the Python side (no jax import); the pages are hand-written
vanilla JS + SVG/canvas, inlined, and fetch nothing.

    from jaxattn import views

    html = views.build_html(caps, views=("head", "model", "neuron", "stats"))
    views.write_html("attention.html", caps)              # one capture or a list
    views.View(caps)                                      # in a notebook: shows inline
    head_view(**views.to_bertviz(cap))                    # BertViz's own views
    model_view(**views.to_bertviz(cap, view="model"))
    svg = views.to_svg(cap, "head", layer=2)              # static export, for papers
    views.write_png("head.png", svg)                      # headless chromium
    views.write_segments_html("along.html", cap)          # long documents: statistics
                                                          # along the text, no map needed

    # the live viewer (`jaxattn web`)
    server, port = views.create_web_server(engine, ("127.0.0.1", 8000))

Modules: `payload` (captures -> the web viewer's JSON, and the page's packed
data: a shared token table, per-example raw-deflate sections),
`stats` (the stats view's numbers from `jaxattn.analysis`), `page` (the HTML),
`causal` (whether a capture is a decoder's), `long_maps` (a long example's pooled
maps and bands, the head view's window),
`segments` and `segments_page` (the stats-first page: statistics along the text),
`svg` (static SVG of the head, model and neuron views, written from Python) and
`stats_svg` (the stats view's), with `drawing`'s colours, colour bars, max pooling
and layout, `png` (chromium screenshots), `web` (the live viewer, stdlib
http.server), `bertviz` (a Capture as BertViz's arguments), `compare` and
`compare_page` (two captures side by side), `qk_payload` and `qk_page` (the global
query-key map). The scripts are in
`static/`.
"""

import importlib

from jaxattn.views.bertviz import to_bertviz
from jaxattn.views.page import View, build_html, write_html
from jaxattn.views.payload import VIEWS, build_payload

_LAZY = {
    "to_svg": ("jaxattn.views.svg", "to_svg"),
    "write_png": ("jaxattn.views.png", "write_png"),
    "build_segments_html": ("jaxattn.views.segments_page", "build_segments_html"),
    "write_segments_html": ("jaxattn.views.segments_page", "write_segments_html"),
    "find_chromium": ("jaxattn.views.png", "find_chromium"),
    "create_web_server": ("jaxattn.views.web", "create_web_server"),
}


def __getattr__(name):
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'jaxattn.views' has no attribute {name!r}")


__all__ = [
    "VIEWS",
    "View",
    "build_html",
    "build_segments_html",
    "create_web_server",
    "find_chromium",
    "build_payload",
    "to_bertviz",
    "to_svg",
    "write_html",
    "write_png",
    "write_segments_html",
]
