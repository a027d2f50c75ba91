"""The head view as BertViz's, in a real browser: line opacity = weight / active heads,
the all/none control, line tooltips, and the per-head boxes beside the attended tokens."""

from __future__ import annotations

import numpy as np
import pytest
from views_helpers import norm_weights, screenshot, wait_ready

# the pointer reaches the element (its tooltip is made then), then its numbers and tooltip
TIP = "e.dispatchEvent(new MouseEvent('mouseover', {bubbles: true})); const tip = e.textContent;"
LINE = f"e => {{ {TIP} return [+e.dataset.w, +e.getAttribute('stroke-opacity'), tip]; }}"
BOX_TIP = f"e => {{ {TIP} return tip; }}"
BOXES = (
    "els => els.map(e => [e.dataset.side, +e.dataset.idx, +e.dataset.head, +e.dataset.w,"
    " +e.getAttribute('fill-opacity'), +e.getAttribute('width'), +e.getAttribute('x'),"
    " e.getAttribute('fill')])"
)
CHIP_COLOR = "e => getComputedStyle(e).backgroundColor"


@pytest.fixture
def loaded(page, tiny_html):
    page.goto(tiny_html.as_uri())
    wait_ready(page)
    return page


def line(page, i: int, j: int, h: int):
    """(weight, stroke-opacity, tooltip) of one drawn line, None when it is not drawn."""
    el = page.query_selector(f'#hv-svg line[data-i="{i}"][data-j="{j}"][data-head="{h}"]')
    return None if el is None else el.evaluate(LINE)


def test_opacity_divides_by_active_heads_and_all_none(loaded, tiny_caps):
    page, cap = loaded, tiny_caps[0]
    att, n_heads = cap.attention, len(cap.heads)
    w, opacity, tip = line(page, 1, 2, 0)
    assert w == pytest.approx(att[0, 0, 1, 2], abs=1e-6)
    assert opacity == pytest.approx(w / n_heads, abs=1e-6)
    assert tip == f"head {cap.heads[0]}: {cap.tokens[1]} → {cap.tokens[2]}, weight {w:.3f}"
    assert f"/ {n_heads} active heads" in page.inner_text("#hv-legend")
    assert page.get_attribute("#hv-svg", "data-active") == str(n_heads)

    page.click('.chip[data-head="1"]')  # one head fewer: every line of head 0 gets darker
    assert line(page, 1, 2, 0)[1] == pytest.approx(w / (n_heads - 1), abs=1e-6)
    assert line(page, 1, 2, 1) is None
    page.dblclick('.chip[data-head="0"]')  # head 0 alone: opacity = weight
    assert line(page, 1, 2, 0)[1] == pytest.approx(w, abs=1e-6)

    page.click("#hv-none")
    on = page.eval_on_selector_all(".chip", "els => els.map(e => e.dataset.on)")
    assert on == ["0"] * n_heads
    assert page.eval_on_selector_all("#hv-svg line", "e => e.length") == 0
    assert "No head selected" in page.inner_text("#hv-legend")
    page.click("#hv-all")
    on = page.eval_on_selector_all(".chip", "els => els.map(e => e.dataset.on)")
    assert on == ["1"] * n_heads
    assert page.eval_on_selector_all("#hv-svg line", "e => e.length") == np.count_nonzero(att[0])
    assert line(page, 1, 2, 0)[1] == pytest.approx(w / n_heads, abs=1e-6)
    # the chips and the lines share the head's colour
    chip = page.eval_on_selector('.chip[data-head="2"]', CHIP_COLOR)
    stroke = page.get_attribute('#hv-svg line[data-head="2"]', "stroke")
    assert chip == "rgb({}, {}, {})".format(*(int(stroke[k : k + 2], 16) for k in (1, 3, 5)))

    page.select_option("#kind", "norm")  # the norm-based weights say how they are normalised
    assert "divided by its sum" in page.inner_text("#hv-legend")
    norm = norm_weights(cap)[0]
    w, opacity, _ = line(page, 1, 2, 0)
    assert (w, opacity) == pytest.approx((norm[0, 1, 2], norm[0, 1, 2] / n_heads), abs=1e-6)


def test_hover_shows_one_box_per_active_head(loaded, tiny_caps):
    page, cap = loaded, tiny_caps[0]
    att, t, n_heads = cap.attention[0], cap.length, len(cap.heads)
    assert page.query_selector("rect.hv-box") is None  # no boxes before a hover

    page.hover('text.tok[data-side="left"][data-idx="2"]')  # query 2: boxes beside the keys
    boxes = page.eval_on_selector_all("rect.hv-box", BOXES)
    assert len(boxes) == n_heads * t
    assert {(b[1], b[2]) for b in boxes} == {(j, h) for j in range(t) for h in range(n_heads)}
    strip = sum(b[5] for b in boxes if b[1] == 0)  # the heads share one strip per token
    x0 = min(b[6] for b in boxes)
    for side, j, h, w, opacity, width, x, fill in boxes:
        assert side == "right"
        assert w == pytest.approx(att[h, 2, j], abs=1e-6) and opacity == w
        assert width == pytest.approx(strip / n_heads)
        assert x == pytest.approx(x0 + h * width)  # side by side, in head order
        assert fill == page.get_attribute(f'#hv-svg line[data-head="{h}"]', "stroke")
    tip = page.eval_on_selector('rect.hv-box[data-idx="4"][data-head="1"]', BOX_TIP)
    want = f"head {cap.heads[1]}: {cap.tokens[2]} → {cap.tokens[4]}, weight {att[1, 2, 4]:.3f}"
    assert tip == want
    screenshot(page, "head_view_boxes")

    page.click('text.tok[data-side="left"][data-idx="2"]')  # pin it, then turn a head off
    page.click('.chip[data-head="1"]')
    boxes = page.eval_on_selector_all("rect.hv-box", BOXES)
    assert len(boxes) == (n_heads - 1) * t
    assert {b[2] for b in boxes} == {0, 2}
    assert all(b[5] == pytest.approx(strip / (n_heads - 1)) for b in boxes)
    assert all(b[6] == pytest.approx(x0 + strip / (n_heads - 1)) for b in boxes if b[2] == 2)
    page.click('text.tok[data-side="left"][data-idx="2"]')  # unpin

    page.hover('text.tok[data-side="right"][data-idx="3"]')  # key 3: boxes beside its queries
    boxes = page.eval_on_selector_all("rect.hv-box", BOXES)
    assert len(boxes) == (n_heads - 1) * t
    for side, i, h, w, *_ in boxes:
        assert side == "left" and w == pytest.approx(att[h, i, 3], abs=1e-6)
    page.mouse.move(1000, 10)
    assert page.query_selector("rect.hv-box") is None
