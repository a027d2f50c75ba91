"""The global query-key map page in headless Chromium: grid, points, hover, click-through.

The page is built from made-up sentences and coordinates drawn here (no model), so
every expectation (which token a point is, which head's weights a line shows) is
this file's own.
"""

from __future__ import annotations

import numpy as np
import pytest
from views_helpers import screenshot

from jaxattn.views.qk_page import build_global_html
from jaxattn.views.qk_payload import SentenceSample, pack_global, sampled_sentence

L, H, K = 2, 3, 4
Q_RGB, K_RGB = (31, 119, 180), (255, 127, 14)
CLASS_RGB = [(120, 120, 120), (44, 160, 44), (214, 39, 40)]  # word, punctuation, special
PIXEL = """([x, y]) => Array.from(document.getElementById('qk-canvas').getContext('2d')
  .getImageData(x, y, 1, 1).data)"""


def _page(tmp_path, sentences: int, length: int, seed: int = 0):
    """(path, records, {sentence: its attention [L, H, T, T]}) of a made-up corpus."""
    rng = np.random.default_rng(seed)
    sample = SentenceSample(sentences, sentences * length, seed)
    atts = {}
    for s in range(sentences):
        toks = ["[CLS]", *(f"w{s}x{t}" for t in range(length - 3)), ".", "[SEP]"]
        att = rng.random((L, H, length, length))
        att /= att.sum(-1, keepdims=True)
        atts[s] = att
        q, k = rng.normal(size=(2, L, H, length, K))
        # origin: (INPUT 0, record 100 + s), what the hover and the head view name
        sample.offer(s, length, lambda: sampled_sentence(s, toks, q, k, att, None, (0, 100 + s)))  # noqa: B023
    records = sample.records()
    n = sentences * length
    xy = rng.normal(size=(2, L, H, n, 2))
    xy[:, 1, 2] = rng.uniform(-1, 1, size=(2, n, 2))  # layer 1, head 2: x spans 2:1 y
    xy[0, 1, 2, :2] = [[-1, -1], [1, 1]]
    xy[:, 1, 2, :, 0] *= 2
    header, sections = pack_global(
        records,
        {"pca": (xy[0], xy[1])},
        layers=list(range(L)),
        heads=list(range(H)),
        explained=np.full((L * H, 2), 0.25),
        sampled=sample.summary(),
        model="made-up",
        inputs=["corpus.txt"],
    )
    path = tmp_path / "qk.html"
    path.write_text(build_global_html(header, sections, title="qk test"), encoding="utf-8")
    return path, records, atts


def _open(page, path):
    page.goto(path.as_uri())
    page.wait_for_selector('#qk[data-state="ready"]', timeout=30000)


def test_grid_points_hover_and_click_through(page, tmp_path):
    path, records, atts = _page(tmp_path, sentences=7, length=9)
    _open(page, path)
    thumbs = page.locator("#qk-grid canvas")
    assert thumbs.count() == L * H
    heads = {
        (int(c.get_attribute("data-layer")), int(c.get_attribute("data-head")))
        for c in thumbs.all()
    }
    assert heads == {(a, b) for a in range(L) for b in range(H)}
    for c in thumbs.all():  # every thumbnail has drawn points
        assert (
            c.evaluate(
                "c => c.getContext('2d').getImageData(0,0,c.width,c.height).data"
                ".filter((v,i)=>i%4===3 && v>0).length"
            )
            > 20
        )
    page.locator('#qk-grid canvas[data-layer="1"][data-head="2"]').click()
    page.wait_for_selector('#qk[data-g="5"]')  # selectors: the page's CSP forbids eval
    assert page.inner_text("#qk-title") == "Layer 1, head 2"
    n = sum(len(r.tokens) for r in records)
    pts = np.array(page.evaluate(f"[...Array({2 * n}).keys()].map(i => JaxattnQK.debug.screen(i))"))
    span = np.ptp(pts, 0)  # the head's 2:1 points keep their aspect on the square
    assert span[0] == pytest.approx(2 * span[1], rel=1e-3) and span[0] > 600
    d = np.linalg.norm(pts[:, None] - pts[None], axis=-1) + np.eye(2 * n) * 1e9
    i = int(d.min(1).argmax())  # the most isolated point
    x, y = pts[i]
    px = page.evaluate(PIXEL, [round(x), round(y)])
    want = np.array(Q_RGB if i < n else K_RGB) * 0.7 + 255 * 0.3
    np.testing.assert_allclose(px[:3], want, atol=2)
    j = i % n
    s = np.searchsorted(np.cumsum([len(r.tokens) for r in records]), j, side="right")
    t = j - sum(len(r.tokens) for r in records[:s])
    page.select_option("#qk-colour", "type")  # special / punctuation / word colours
    page.wait_for_selector('#qk-legend:has-text("special")')
    tok = records[s].tokens[t]
    kind = 2 if tok in ("[CLS]", "[SEP]") else 1 if tok == "." else 0
    px = page.evaluate(PIXEL, [round(x), round(y)])
    want = np.array(CLASS_RGB[kind]) * 0.7 + 255 * 0.3
    np.testing.assert_allclose(px[:3], want, atol=2)
    box = page.locator("#qk-canvas").bounding_box()
    page.mouse.move(box["x"] + x, box["y"] + y)
    assert page.inner_text("#qk-token") == records[s].tokens[t]
    tip = page.inner_text("#qk-tip")
    assert tip.startswith("query" if i < n else "key") and records[s].tokens[1] in tip
    assert f"corpus.txt example {100 + records[s].index}, position {t}" in tip
    page.mouse.click(box["x"] + x, box["y"] + y)
    page.wait_for_selector('#qk-head[data-state="ready"]')
    panel = page.locator("#qk-head")
    assert (
        panel.get_attribute("data-sentence"),
        panel.get_attribute("data-layer"),
        panel.get_attribute("data-head"),
    ) == (str(records[s].index), "1", "2")
    assert panel.get_attribute("data-record") == str(100 + records[s].index)
    a = np.rint(atts[records[s].index][1, 2] * 255)  # the selected head's weights, uint8
    q, k = (t, int(a[t].argmax())) if i < n else (int(a[:, t].argmax()), t)
    line = page.locator(f'#qk-hv line[data-q="{q}"][data-k="{k}"]')
    assert float(line.get_attribute("stroke-opacity")) == pytest.approx(a[q, k] / 255, abs=1e-3)
    screenshot(page, "qk-map")


def test_fifty_thousand_points_draw_fast(page, tmp_path):
    path, _, _ = _page(tmp_path, sentences=1000, length=25, seed=1)  # 2 x 25,000 points
    _open(page, path)
    times = [page.evaluate("JaxattnQK.debug.draw()") for _ in range(3)]
    assert page.evaluate("JaxattnQK.debug.visible()") == 50000
    dark = page.evaluate(
        "(() => { const c = document.getElementById('qk-canvas'); return c."
        "getContext('2d').getImageData(0,0,c.width,c.height).data"
        ".filter((v,i)=>i%4===0 && v<200).length; })()"
    )
    assert dark > 20000  # points cover the canvas
    print(f"draw of 50,000 points: {min(times):.1f} ms (best of 3)")
    assert min(times) < 500
