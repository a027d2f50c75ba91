"""The neuron view's sentence filter, lines and position indices, and the colour bars
of the model, stats and neuron views, in headless Chromium against the capture."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from views_helpers import screenshot, wait_ready

from jaxattn.analysis import head_statistics
from jaxattn.views import write_html

LINES = (
    "els => els.map(e => [+e.dataset.i, +e.dataset.j, +e.dataset.w,"
    " +e.getAttribute('stroke-opacity')])"
)
INDEXED = "els => els.map(e => [+e.dataset.{a}, e.querySelector('.nv-idx').textContent])"
BAR = (
    "e => [+e.dataset.min, +e.dataset.max, e.querySelector('.jx-cbar-min').textContent,"
    " e.querySelector('.jx-cbar-max').textContent,"
    " getComputedStyle(e.querySelector('.jx-cbar-ramp')).backgroundImage,"
    " e.querySelector('.jx-cbar-ramp').getBoundingClientRect().width]"
)


def lines_from(page, query: int, att_row: np.ndarray) -> set:
    """The keys the drawn lines reach; each from `query`, opacity = its attention weight."""
    keys = set()
    for i, j, w, opacity in page.eval_on_selector_all("#nv-rows line.nv-line", LINES):
        assert i == query
        assert w == opacity == pytest.approx(att_row[j], abs=1e-5)
        keys.add(j)
    return keys


def indexed(page, selector: str, attr: str) -> list:
    """[(index, shown position index)] of the elements; the shown index is the index."""
    rows = page.eval_on_selector_all(selector, INDEXED.format(a=attr))
    assert all(str(i) == shown for i, shown in rows), rows
    return sorted(i for i, _ in rows)


def bar(page, selector: str):
    lo, hi, lo_text, hi_text, ramp, width = page.eval_on_selector(selector, BAR)
    assert "linear-gradient" in ramp and width >= 30
    assert float(lo_text) == pytest.approx(lo, rel=1e-2, abs=1e-3)
    assert float(hi_text) == pytest.approx(hi, rel=1e-2, abs=1e-3)
    return lo, hi


def test_neuron_sentence_filter_lines_and_position_indices(page, tiny_html, tiny_caps):
    page.goto(tiny_html.as_uri())
    wait_ready(page)
    page.click('.tab[data-view="neuron"]')
    page.wait_for_selector("#nv-rows line.nv-line", state="attached")
    assert page.query_selector("#nv-filter") is None  # one sentence: nothing to filter
    page.select_option("#example", "1")
    wait_ready(page, 1)
    cap = tiny_caps[1]
    t, b, (layer, head) = cap.length, cap.sentence_b_start, (1, 2)
    att = cap.attention[layer, head]
    page.select_option("#nv-layer", str(layer))
    page.select_option("#nv-head", str(head))
    page.click('.nv-qtok[data-i="3"]')  # a query token of the left column
    assert lines_from(page, 3, att[3]) == set(range(t))
    assert indexed(page, "#nv-rows .nv-row", "j") == list(range(t))
    assert indexed(page, "#nv-rows .nv-qtok", "i") == list(range(t))

    page.select_option("#nv-filter", "AB")  # queries of sentence A, keys of sentence B
    assert lines_from(page, 3, att[3]) == set(range(b, t))
    assert indexed(page, "#nv-rows .nv-row", "j") == list(range(b, t))
    assert indexed(page, "#nv-rows .nv-qtok", "i") == list(range(b))
    cells = page.eval_on_selector_all("#nv-rows .cell", "els => els.map(e => +e.dataset.j)")
    assert cells and min(cells) >= b  # no cell of a sentence-A key is left
    options = page.eval_on_selector_all("#nv-token option", "els => els.map(e => +e.value)")
    assert options == list(range(b))
    share = f"{100 * att[3, b:].sum():.1f}% of this query's attention"
    assert share in page.text_content("#nv-info")
    screenshot(page, "neuron_view_A_to_B")

    page.select_option("#nv-filter", "BA")  # the query moves into sentence B
    assert page.eval_on_selector("#nv-token", "e => +e.value") == b
    assert lines_from(page, b, att[b]) == set(range(b))
    assert indexed(page, "#nv-rows .nv-qtok", "i") == list(range(b, t))


def test_colour_bars_state_their_ranges(page, tiny_html, tiny_caps):
    page.goto(tiny_html.as_uri())
    wait_ready(page)
    cap = tiny_caps[0]
    page.click('.tab[data-view="model"]')
    assert bar(page, "#mv-cbar") == (0, 1)
    page.click('canvas.thumb[data-layer="1"][data-head="2"]')
    assert bar(page, "#mv-big-cbar") == (0, 1)
    screenshot(page, "model_view_colour_bar", full_page=False)

    page.click('.tab[data-view="stats"]')
    page.wait_for_selector("#view-stats .jx-cbar")
    stats = head_statistics(cap.attention, cap.tokens)
    for name, x in stats.items():
        lo, hi = bar(page, f'#view-stats figure[data-stat="{name}"] .jx-cbar')
        assert lo == pytest.approx(min(0.0, np.nanmin(x)), abs=1e-5), name
        assert hi == pytest.approx(np.nanmax(x), abs=1e-5), name
    assert page.query_selector("#sv-vig-legend") is not None
    screenshot(page, "stats_view_colour_bars")

    page.click('.tab[data-view="neuron"]')  # layer 0, head 0, query token 0
    q, k = cap.queries[0, 0, 0].astype(np.float64), cap.keys[0, 0].astype(np.float64)
    dot = np.abs(k @ q).max()
    assert bar(page, "#nv-cbar-dot") == pytest.approx((-dot, dot), rel=1e-5)
    qk = np.abs(k * q).max()
    assert bar(page, "#nv-cbar-qk") == pytest.approx((-qk, qk), rel=1e-5)
    assert bar(page, "#nv-cbar-softmax") == (0, 1)


def test_neuron_view_without_queries_says_how_to_get_them(page, tiny_caps, tmp_path):
    """A capture without queries and keys: the page's neuron view names them and how to capture."""
    cap = tiny_caps[0]
    bare = dataclasses.replace(cap, tensors={"attention": cap.attention})
    path = tmp_path / "bare.html"
    write_html(path, bare, views=("neuron",))
    page.goto(path.as_uri())
    wait_ready(page)
    page.wait_for_selector("#nv-info")
    assert page.text_content("#nv-info") == (
        "The neuron view needs the queries and keys: capture with what=(..., 'queries', 'keys')."
    )
    assert page.query_selector("#nv-rows .nv-row") is None
