"""Every static view's SVG is text a notebook draws: a `str` with the SVG text, which
Jupyter shows as the picture through `_repr_svg_` (IPython's display formatter gives
image/svg+xml), written and concatenated as plain text as before."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from test_views_static import synthetic

from jaxattn.cli import main
from jaxattn.views import to_svg
from jaxattn.views.stats_svg import stats_svg
from jaxattn.views.svg import head_svg, model_svg, neuron_svg

VIEWS = ("head", "model", "neuron", "stats")


def check_svg_text(svg) -> str:
    """The plain text of `svg`, checked to be a whole SVG document that `_repr_svg_` gives."""
    assert isinstance(svg, str)
    text = str(svg)
    assert type(text) is str and text == svg
    assert text.startswith('<svg xmlns="http://www.w3.org/2000/svg"') and text.endswith("</svg>\n")
    ET.fromstring(text)  # one XML document
    assert svg._repr_svg_() == text
    assert type(svg + "<br>") is str and svg + "<br>" == text + "<br>"  # text joins as text
    return text


def test_each_view_and_maker_returns_svg_text_a_notebook_draws():
    cap = synthetic(2, 2, 6)
    for view in VIEWS:
        check_svg_text(to_svg(cap, view))
    for svg in (head_svg(cap), model_svg(cap), neuron_svg(cap, token=2), stats_svg(cap)):
        check_svg_text(svg)


def test_ipython_shows_it_as_an_image():
    formatters = pytest.importorskip("IPython.core.formatters")
    svg = to_svg(synthetic(1, 2, 5), "head")
    data, _ = formatters.DisplayFormatter().format(svg)
    assert data["image/svg+xml"] == str(svg)


def test_the_cli_writes_the_same_text(tmp_path):
    cap = synthetic(1, 2, 5)
    cap.save(tmp_path / "a.npz")
    for view in VIEWS:
        out = tmp_path / f"{view}.svg"
        assert main(["view", str(tmp_path / "a.npz"), "--views", view, "--out", str(out)]) == 0
        assert out.read_text(encoding="utf-8") == check_svg_text(to_svg(cap, view))
