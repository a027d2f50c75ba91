"""A decoder's page in headless Chromium (issue 30): the tiny Llama (4 query heads, 2
key/value heads), a short text and a ~1,100-token one. No line for j > i, the masked
future grey in the model maps, the neuron view's key/value head and causal softmax,
and the long text's head view a window of tokens that a search moves."""

from __future__ import annotations

import time

import numpy as np
import pytest
from views_helpers import screenshot, wait_ready

from jaxattn.views import write_html

LOAD_BOUND_S = 20.0  # the long example: decode + the first head view, on a busy machine
MASKED = [230, 230, 230, 255]  # model.js's JX.MASKED
PIXELS = "c => Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data)"
LINES = "els => els.map(e => [+e.dataset.i, +e.dataset.j, +e.dataset.head, +e.dataset.w])"


@pytest.fixture(scope="module")
def llama_html(decoder_caps, tmp_path_factory):
    short, long = decoder_caps["llama"]
    path = tmp_path_factory.mktemp("decoder") / "llama.html"
    write_html(path, [short[1], long], views=("head", "model", "neuron"), embed="float32")
    return path


def test_a_decoder_page_draws_the_causal_triangle_and_the_groups(page, llama_html, decoder_caps):
    cap = decoder_caps["llama"][0][1]
    t = cap.length
    page.goto(llama_html.as_uri())
    wait_ready(page)
    assert page.get_attribute("#hv-legend", "data-causal") == "1"
    lines = page.eval_on_selector_all("#hv-svg line", LINES)
    assert lines and all(j <= i for i, j, _, _ in lines)
    for i, j, h, w in lines:
        assert w == pytest.approx(cap.attention[0, h, i, j], abs=1e-6)
    assert len(lines) == int((cap.attention[0] > 0).sum())
    # model view: every thumbnail grey exactly above the diagonal
    page.click('button.tab[data-view="model"]')
    # A function, not an expression: Playwright evals an expression inside the page,
    # which the page's CSP (no 'unsafe-eval') refuses whenever the first check fails.
    page.wait_for_function(
        "() => document.querySelectorAll('canvas.thumb[data-drawn]').length >= 4"
    )
    assert "earlier tokens" in page.text_content("#mv-info")
    for c in page.query_selector_all("canvas.thumb[data-drawn]")[:4]:
        px = np.array(c.evaluate(PIXELS), np.uint8).reshape(t, t, 4)
        masked = (px == MASKED).all(-1)
        np.testing.assert_array_equal(masked, np.triu(np.ones((t, t), bool), 1))
    # neuron view: head 3 reads key/value head 1 (= 3 // 2), softmax over j <= i
    page.click('button.tab[data-view="neuron"]')
    assert page.input_value("#nv-token") == str(t - 1)  # a decoder's: its last token
    page.select_option("#nv-head", "3")
    page.select_option("#nv-token", "4")
    assert page.get_attribute("#nv-group", "data-kv") == "1"
    got = page.eval_on_selector_all(
        "line.nv-line", "els => els.map(e => [+e.dataset.j, +e.dataset.w])"
    )
    assert sorted(j for j, _ in got) == list(range(5))
    for j, w in got:
        assert w == pytest.approx(cap.attention[0, 3, 4, j], abs=2e-5)
    assert len(page.query_selector_all(".nv-row.masked")) == t - 5
    screenshot(page, "decoder-neuron")


def test_a_long_decoder_text_is_shown_a_window_at_a_time(page, llama_html, decoder_caps):
    long = decoder_caps["llama"][1]
    page.goto(llama_html.as_uri())
    wait_ready(page)
    t0 = time.perf_counter()
    page.select_option("#example", "1")
    wait_ready(page, 1)
    assert time.perf_counter() - t0 < LOAD_BOUND_S
    assert int(page.get_attribute("#hv-svg", "data-drawn")) <= 5000
    lo = int(page.get_attribute("#hv-window", "data-lo"))
    hi = int(page.get_attribute("#hv-window", "data-hi"))
    assert (lo, hi) == (0, 512)
    page.fill("#hv-from", "500")
    page.dispatch_event("#hv-from", "change")
    assert page.get_attribute("#hv-window", "data-lo") == "500"
    ij = page.eval_on_selector_all("#hv-svg line", LINES)
    assert all(500 <= j <= i < 1012 for i, j, _, _ in ij)
    word = long.tokens[-3].strip()
    page.fill("#hv-find", word)
    page.press("#hv-find", "Enter")
    sel = page.query_selector("#hv-svg text.tok.sel")
    i = int(sel.get_attribute("data-idx"))
    lo = int(page.get_attribute("#hv-window", "data-lo"))
    assert lo <= i < lo + 512 and word.lower() in long.tokens[i].lower()
    ij = page.eval_on_selector_all("#hv-svg line", LINES)
    assert ij and all(a == i and b <= i for a, b, _, _ in ij)  # the found token's lines
    screenshot(page, "decoder-long-head")
