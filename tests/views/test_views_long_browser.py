"""Long inputs in the browser (issue 31): the head view's window of a long example
(hover, click, search), its model view from the pooled maps, and the stats-first page.

One synthetic capture (`views_helpers.long_capture`) just over `LONG_TOKENS`, so the
page embeds bands and pooled maps as an 8,192-token one does (test_views_long.py
checks the size at 8,192).
"""

from __future__ import annotations

import numpy as np
import pytest
from views_helpers import THUMB_ALPHA, long_capture, wait_ready

from jaxattn.views.drawing import max_pool
from jaxattn.views.long_maps import LONG_TOKENS, RADIUS, token_window
from jaxattn.views.segments import segments_document

T = LONG_TOKENS + 52


@pytest.fixture(scope="module")
def long_pages(tmp_path_factory):
    from jaxattn.views import write_html
    from jaxattn.views.segments_page import write_segments_html

    cap = long_capture(T, heads=2, seed=2)
    folder = tmp_path_factory.mktemp("long")
    write_html(folder / "long.html", cap, views=("head", "model", "stats"), embed="uint8")
    write_segments_html(folder / "stats.html", cap, segment=128)
    return cap, folder


def _window(page) -> tuple[int, int]:
    w = page.query_selector("#hv-window")
    return int(w.get_attribute("data-lo")), int(w.get_attribute("data-hi"))


def _lines(page) -> np.ndarray:
    """(i, j, head, weight) of the head view's lines, as rows."""
    return np.array(
        page.eval_on_selector_all(
            "#hv-svg line",
            "els => els.map(e => [+e.dataset.i, +e.dataset.j, +e.dataset.head, +e.dataset.w])",
        )
    ).reshape(-1, 4)


def test_the_head_view_opens_a_window_around_a_token(page, long_pages):
    cap, folder = long_pages
    att = np.rint(cap.attention[0] * 255) / 255  # what the uint8 page holds
    page.goto((folder / "long.html").as_uri())
    wait_ready(page)
    page.wait_for_selector("#hv-svg line", state="attached")
    assert _window(page) == token_window(0, T) == (0, 2 * RADIUS + 1)
    assert page.query_selector("#hv-first").is_hidden()  # the window holds the first token
    toks = page.eval_on_selector_all('text.tok[data-side="left"]', "e => e.length")
    assert toks == 2 * RADIUS + 1
    # hovering a token of the window: its lines, all of them, with the page's weights
    page.hover('text.tok[data-side="left"][data-idx="40"]')
    i, j, h, w = _lines(page).T
    assert set(i) == {40} and j.max() < 2 * RADIUS + 1
    assert len(w) == np.count_nonzero(att[:, 40, : 2 * RADIUS + 1])
    np.testing.assert_allclose(w, cap.attention[0, h.astype(int), 40, j.astype(int)], atol=2e-3)
    # clicking a token centres the window on it and pins it
    page.click('text.tok[data-side="right"][data-idx="100"]')
    assert _window(page) == token_window(100, T) == (100 - RADIUS, 101 + RADIUS)
    i, j, h, w = _lines(page).T
    assert set(j) == {100} and i.min() >= 100 - RADIUS
    # the search box: the next token containing the text, centred and pinned
    page.fill("#hv-find", "tok2000")
    page.press("#hv-find", "Enter")
    page.wait_for_function("() => document.querySelector('#hv-window').dataset.center === '2000'")
    assert _window(page) == token_window(2000, T)
    i, j, _, _ = _lines(page).T
    assert set(i) == {2000} and j.min() >= 2000 - RADIUS and j.max() <= 2000 + RADIUS
    # its weight on the first token, outside the window, per head
    first = page.query_selector("#hv-first")
    assert first.get_attribute("data-query") == "2000" and first.is_visible()
    sinks = [float(v) for v in first.get_attribute("data-weights").split(",")]
    np.testing.assert_allclose(sinks, cap.attention[0, :, 2000, 0], atol=1 / 510 + 1e-6)
    page.fill("#hv-find", f"tok{T - 1}")  # at the end: the window shifts inside the text
    page.press("#hv-find", "Enter")
    page.wait_for_function(
        f"() => document.querySelector('#hv-window').dataset.center === '{T - 1}'"
    )
    assert _window(page) == (T - 2 * RADIUS - 1, T)
    # the model view: thumbnails from the pooled maps, as max pooling the whole map
    page.click('.tab[data-view="model"]')
    thumb = page.wait_for_selector('canvas.thumb[data-layer="0"][data-head="1"][data-drawn]')
    alpha = np.array(thumb.evaluate(THUMB_ALPHA)).reshape(64, 64)
    assert np.abs(alpha - np.rint(max_pool(att[1], 64) * 255)).max() <= 1
    page.click('canvas.thumb[data-layer="0"][data-head="1"]')
    big = page.wait_for_selector("#mv-big")
    assert big.get_attribute("data-res") == "256"
    # the stats view of a long example: statistics along the text
    page.click('.tab[data-view="stats"]')
    page.wait_for_selector('canvas.sg-map[data-stat="sink"]')
    assert not page.errors


def test_the_stats_first_page_shows_the_segment_numbers(page, long_pages):
    cap, folder = long_pages
    doc = segments_document(cap, segment=128)
    page.goto((folder / "stats.html").as_uri())
    page.wait_for_selector('#jaxattn[data-state="ready"]')
    maps = page.query_selector_all("canvas.sg-map")
    assert [m.get_attribute("data-stat") for m in maps] == ["sink", "prev", "local", "entropy"]
    sink = maps[0]
    rows, cols = int(sink.get_attribute("data-rows")), int(sink.get_attribute("data-cols"))
    assert rows == 2 and cols == len(doc["bounds"]) + 2
    box = sink.bounding_box()
    cw = (box["width"] - 56) / cols
    for segment, head in ((0, 0), (5, 1), (-1, 1)):  # -1: the whole-text column
        x = 56 + cw * ((segment + 2 if segment >= 0 else 0) + 0.5)
        sink.hover(position={"x": x, "y": box["height"] * (head + 0.5) / rows})
        readout = page.query_selector("#sg-readout")
        assert int(readout.get_attribute("data-segment")) == segment
        want = (
            doc["kinds"]["attention"]["whole"]["sink"][0][head]
            if segment < 0
            else doc["kinds"]["attention"]["segments"]["sink"][0][head][segment]
        )
        assert float(readout.get_attribute("data-v")) == pytest.approx(want)
    sink.click(position={"x": 70, "y": box["height"] * 0.75})
    page.wait_for_selector('#sg-curves[data-head="1"] polyline[data-stat="prev"]')
    assert not page.errors
