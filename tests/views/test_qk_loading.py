"""The global map's page before its data is ready: the caption, a loading state and the
grid's frame show at once (a headless screenshot caught an empty box), then the grid.

Inflation is held back by the test (`Response.arrayBuffer`, which every section's
inflation ends in, waits for a gate the test opens), so "before the data is ready" is
a state the test holds, not a race. A MiniLM-sized grid (6 layers x 12 heads) must be
in view in a 1280 x 900 window.
"""

from __future__ import annotations

import numpy as np
from views_helpers import THUMB_ALPHA, screenshot

from jaxattn.views.qk_page import build_global_html
from jaxattn.views.qk_payload import SentenceSample, pack_global, sampled_sentence

L, H, K = 6, 12, 4
GATE = """(() => {
  let open;
  window.__qkGate = new Promise((resolve) => { open = resolve; });
  window.__qkOpen = () => open();
  const arrayBuffer = Response.prototype.arrayBuffer;
  Response.prototype.arrayBuffer = async function () {
    await window.__qkGate;
    return arrayBuffer.call(this);
  };
})();"""
PIXEL = """([x, y]) => Array.from(document.getElementById('qk-canvas').getContext('2d')
  .getImageData(x, y, 1, 1).data)"""


def _page(tmp_path, sentences: int = 6, length: int = 7):
    rng = np.random.default_rng(0)
    sample = SentenceSample(sentences, sentences * length, 0)
    for s in range(sentences):
        toks = ["[CLS]", *(f"w{s}x{t}" for t in range(length - 3)), ".", "[SEP]"]
        att = np.full((L, H, length, length), 1 / length)
        q, k = rng.normal(size=(2, L, H, length, K))
        sample.offer(s, length, lambda: sampled_sentence(s, toks, q, k, att, None, (0, s)))  # noqa: B023
    n = sentences * length
    xy = rng.normal(size=(2, L, H, n, 2))
    header, sections = pack_global(
        sample.records(),
        {"pca": (xy[0], xy[1])},
        layers=list(range(L)),
        heads=list(range(H)),
        explained=np.full((L * H, 2), 0.25),
        sampled=sample.summary(),
        model="made-up",
        inputs=["corpus.txt"],
    )
    path = tmp_path / "qk.html"
    path.write_text(build_global_html(header, sections, title="qk loading"), encoding="utf-8")
    return path, n


def _in_view(page, selector: str) -> bool:
    """Some of the element is in the window."""
    box, height = page.locator(selector).bounding_box(), page.viewport_size["height"]
    return (
        box is not None and box["height"] > 0 and box["y"] < height and box["y"] + box["height"] > 0
    )


def test_caption_and_loading_state_at_once_then_the_grid(page, tmp_path):
    path, n = _page(tmp_path)
    page.add_init_script(GATE)
    page.goto(path.as_uri())
    page.wait_for_selector("#qk-grid canvas.thumb")  # mounted; no section inflated yet
    assert page.get_attribute("#qk", "data-state") == "loading"
    caption = page.inner_text("#qk-caption")
    assert caption.startswith("The queries (blue) and keys (orange) of every head of made-up")
    assert "(6 layers x 12 heads) over 6 sentences" in caption
    assert page.inner_text("#qk-loading") == f"Loading the maps: {2 * n:,} points per head ..."
    assert page.inner_text("#qk-title") == "Loading ..."
    assert page.locator("#qk-grid canvas.thumb.loading").count() == L * H
    assert page.inner_text("#qk-sampled") == f"all {n} tokens of 6 sentences"
    for selector in ("#qk-caption", "#qk-loading", "#qk-grid", "#qk-canvas"):
        assert _in_view(page, selector), selector
    grid = page.locator("#qk-grid").bounding_box()
    assert grid["y"] + grid["height"] <= 900  # the whole grid is seen, before the large map
    assert page.evaluate(PIXEL, [5, 5])[:3] == [246, 246, 246]  # the canvas's loading fill
    screenshot(page, "qk-loading", full_page=False)
    # a click while loading is kept: that head is the one drawn when the data is there
    page.locator('#qk-grid canvas[data-layer="2"][data-head="5"]').click()
    assert page.get_attribute("#qk", "data-state") == "loading"

    page.evaluate("() => window.__qkOpen()")
    page.wait_for_selector('#qk[data-state="ready"]', timeout=30000)
    assert page.locator("#qk-loading").count() == 0
    assert page.locator("#qk-grid canvas.thumb.loading").count() == 0
    assert page.inner_text("#qk-title") == "Layer 2, head 5"
    assert page.get_attribute("#qk", "data-g") == str(2 * H + 5)
    assert page.inner_text("#qk-caption") == caption  # the caption stays
    for c in page.locator("#qk-grid canvas").all():  # every thumbnail drawn
        assert sum(1 for a in c.evaluate(THUMB_ALPHA) if a > 0) > 10
    assert page.evaluate(PIXEL, [5, 5])[:3] == [255, 255, 255]  # the map's background
    screenshot(page, "qk-ready", full_page=False)


def test_a_head_chosen_in_the_grid_brings_its_map_into_view(page, tmp_path):
    path, _ = _page(tmp_path)
    page.set_viewport_size({"width": 1280, "height": 600})
    page.goto(path.as_uri())
    page.wait_for_selector('#qk[data-state="ready"]', timeout=30000)
    assert _in_view(page, "#qk-grid") and not _in_view(page, "#qk-canvas")
    page.locator('#qk-grid canvas[data-layer="5"][data-head="11"]').click()
    page.wait_for_selector(f'#qk[data-g="{5 * H + 11}"]')
    assert _in_view(page, "#qk-canvas")


def test_the_page_says_what_it_is_before_any_script_runs(browser, tmp_path):
    """The caption and the loading notice are the page's own HTML: the first paint, while
    a page of many MB is still being read, already shows them."""
    path, n = _page(tmp_path)
    context = browser.new_context(
        java_script_enabled=False, viewport={"width": 1280, "height": 900}
    )
    try:
        page = context.new_page()
        page.goto(path.as_uri())
        assert page.inner_text("#qk-caption").startswith("The queries (blue) and keys (orange)")
        assert page.inner_text("#qk-loading").startswith("Loading the maps")
        assert page.get_attribute("#qk", "data-state") == "loading"
    finally:
        context.close()
