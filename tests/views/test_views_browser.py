"""The static HTML file in a real browser: drawn numbers against the capture's arrays."""

from __future__ import annotations

import numpy as np
import pytest
from views_helpers import THUMB_ALPHA, norm_weights, screenshot, wait_ready

from jaxattn.analysis import KOVALEVA_CLASSES, head_statistics, kovaleva_classes

LINES = (
    "els => els.map(e => [+e.dataset.i, +e.dataset.j, +e.dataset.head,"
    " +e.getAttribute('stroke-opacity'), +e.dataset.w])"
)


def drawn_lines(page) -> dict:
    rows = page.eval_on_selector_all("#hv-svg line", LINES)
    out = {}
    active = len({h for _, _, h, _, _ in rows})  # BertViz: opacity = weight / active heads
    for i, j, h, opacity, w in rows:
        assert opacity == pytest.approx(w / active, rel=1e-6)
        out[(i, j, h)] = w
    assert len(out) == len(rows), "a line drawn twice"
    return out


def expected_lines(w, heads, rows, cols) -> dict:
    """{(i, j, h): w[h, i, j]} for the given heads and query/key ranges (w > 0)."""
    return {
        (i, j, h): float(w[h, i, j]) for h in heads for i in rows for j in cols if w[h, i, j] > 0
    }


def assert_same(got: dict, want: dict, tol: float = 1e-6) -> None:
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert got[k] == pytest.approx(v, abs=tol), k


@pytest.fixture
def loaded(page, tiny_html):
    page.goto(tiny_html.as_uri())
    wait_ready(page)
    return page


def test_head_view_lines_chips_tokens_kind_layer(loaded, tiny_caps):
    page, cap = loaded, tiny_caps[0]
    t, heads = cap.length, range(len(cap.heads))
    att = cap.attention
    assert_same(drawn_lines(page), expected_lines(att[0], heads, range(t), range(t)))
    screenshot(page, "head_view")

    page.click('.chip[data-head="1"]')  # toggle head 1 off
    assert page.get_attribute('.chip[data-head="1"]', "data-on") == "0"
    assert_same(drawn_lines(page), expected_lines(att[0], [0, 2], range(t), range(t)))

    page.click('text.tok[data-side="left"][data-idx="3"]')  # pin query token 3
    page.mouse.move(1000, 10)  # leave the token: the pinned selection stays
    assert_same(drawn_lines(page), expected_lines(att[0], [0, 2], [3], range(t)))

    page.click('text.tok[data-side="right"][data-idx="2"]')  # key token 2: lines into it
    page.mouse.move(1000, 10)
    assert_same(drawn_lines(page), expected_lines(att[0], [0, 2], range(t), [2]))
    page.click('text.tok[data-side="right"][data-idx="2"]')  # unpin
    page.mouse.move(1000, 10)

    page.select_option("#kind", "norm")
    norm = norm_weights(cap)
    assert_same(drawn_lines(page), expected_lines(norm[0], [0, 2], range(t), range(t)))
    page.select_option("#hv-layer", "2")
    assert_same(drawn_lines(page), expected_lines(norm[2], [0, 2], range(t), range(t)))
    page.select_option("#kind", "attention")
    assert_same(drawn_lines(page), expected_lines(att[2], [0, 2], range(t), range(t)))

    page.dblclick('.chip[data-head="2"]')  # only head 2
    assert_same(drawn_lines(page), expected_lines(att[2], [2], range(t), range(t)))
    page.fill("#hv-min", "0.2")
    page.dispatch_event("#hv-min", "change")
    want = {k: v for k, v in expected_lines(att[2], [2], range(t), range(t)).items() if v >= 0.2}
    assert_same(drawn_lines(page), want)


def test_example_switch_and_sentence_filter(loaded, tiny_caps):
    page, cap = loaded, tiny_caps[1]
    assert page.query_selector("#hv-filter") is None  # a single sentence has no filter
    page.select_option("#example", "1")
    wait_ready(page, 1)
    t, b = cap.length, cap.sentence_b_start
    heads = range(len(cap.heads))
    assert_same(drawn_lines(page), expected_lines(cap.attention[0], heads, range(t), range(t)))
    assert page.eval_on_selector_all("text.tok[data-side=left]", "e => e.length") == t
    page.select_option("#hv-filter", "AB")  # sentence A attending to sentence B
    assert_same(drawn_lines(page), expected_lines(cap.attention[0], heads, range(b), range(b, t)))
    screenshot(page, "head_view_pair_A_to_B")
    page.select_option("#example", "0")
    wait_ready(page, 0)
    assert len(drawn_lines(page)) == np.count_nonzero(tiny_caps[0].attention[0] > 0)


def test_model_view_thumbnails_and_enlarge(loaded, tiny_caps):
    page, cap = loaded, tiny_caps[0]
    t = cap.length
    page.click('.tab[data-view="model"]')
    n = len(cap.layers) * len(cap.heads)
    page.wait_for_function(
        f"() => document.querySelectorAll('canvas.thumb[data-drawn=attention]').length === {n}"
    )
    for layer, head in ((0, 0), (1, 2), (2, 1)):
        canvas = page.query_selector(f'canvas.thumb[data-layer="{layer}"][data-head="{head}"]')
        alpha = np.array(canvas.evaluate(THUMB_ALPHA)).reshape(t, t)
        want = np.rint(cap.attention[layer, head] * 255)
        assert np.abs(alpha - want).max() <= 1
    screenshot(page, "model_view")
    page.select_option("#kind", "norm")
    page.wait_for_function(
        f"() => document.querySelectorAll('canvas.thumb[data-drawn=norm]').length === {n}"
    )
    canvas = page.query_selector('canvas.thumb[data-layer="1"][data-head="2"]')
    alpha = np.array(canvas.evaluate(THUMB_ALPHA)).reshape(t, t)
    assert np.abs(alpha - np.rint(norm_weights(cap)[1, 2] * 255)).max() <= 1
    page.click('canvas.thumb[data-layer="1"][data-head="2"]')
    big = page.wait_for_selector("#mv-big")
    assert (big.get_attribute("data-layer"), big.get_attribute("data-head")) == ("1", "2")
    screenshot(page, "model_view_enlarged")
    page.click("#mv-to-head")  # the enlarged head opens in the head view
    assert page.get_attribute("#jaxattn", "data-view") == "head"
    assert_same(drawn_lines(page), expected_lines(norm_weights(cap)[1], [2], range(t), range(t)))


CELLS = "els => els.map(e => [e.dataset.kind, +e.dataset.j, +(e.dataset.k ?? -1), +e.dataset.v])"


def test_neuron_view_cells(loaded, tiny_caps):
    page, cap = loaded, tiny_caps[1]
    page.select_option("#example", "1")
    wait_ready(page, 1)
    page.click('.tab[data-view="neuron"]')
    layer, head, token = 1, 2, 4
    page.select_option("#nv-layer", str(layer))
    page.select_option("#nv-head", str(head))
    page.select_option("#nv-token", str(token))
    q = cap.queries[layer, head, token].astype(np.float64)
    k = cap.keys[layer, head].astype(np.float64)
    dot = k @ q
    s = dot / np.sqrt(q.size)
    soft = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
    got = {}
    for kind, j, c, v in page.eval_on_selector_all("#view-neuron .cell", CELLS):
        got[(kind, j, c)] = v
    t, kd = k.shape
    assert {key for key in got if key[0] == "key"} == {
        ("key", j, c) for j in range(t) for c in range(kd)
    }
    for c in range(kd):
        assert got[("query", token, c)] == pytest.approx(q[c], rel=1e-6, abs=1e-7)
    for j in range(t):
        for c in range(kd):
            assert got[("key", j, c)] == pytest.approx(k[j, c], rel=1e-6, abs=1e-7)
            assert got[("qk", j, c)] == pytest.approx(q[c] * k[j, c], rel=1e-5, abs=1e-7)
        assert got[("dot", j, -1)] == pytest.approx(dot[j], rel=1e-5, abs=1e-6)
        assert got[("softmax", j, -1)] == pytest.approx(soft[j], abs=1e-6)
    # the softmax of q.k/sqrt(K) is the captured attention row
    np.testing.assert_allclose(soft, cap.attention[layer, head, token], atol=1e-5)
    screenshot(page, "neuron_view")


STATS = "els => els.map(e => [e.dataset.stat, +e.dataset.layer, +e.dataset.head, e.dataset.v])"


def test_stats_view_matches_analysis(loaded, tiny_caps):
    page, cap = loaded, tiny_caps[0]
    page.click('.tab[data-view="stats"]')
    page.wait_for_selector('#view-stats rect[data-stat="cls"]')
    cells = page.eval_on_selector_all("#view-stats rect", STATS)
    stats = head_statistics(cap.attention, cap.tokens)
    classes = kovaleva_classes(cap.attention, cap.tokens, cap.sentence_b_start)
    seen = set()
    for stat, layer, head, v in cells:
        if stat in stats:
            assert float(v) == pytest.approx(stats[stat][layer, head], abs=1e-5)
        elif stat == "kovaleva":
            assert int(v) == classes[layer, head] < len(KOVALEVA_CLASSES)
        seen.add(stat)
    assert set(stats) | {"kovaleva", "delimiter", "bag_of_words"} <= seen
    screenshot(page, "stats_view")
    page.select_option("#kind", "norm")
    v = page.get_attribute(
        '#view-stats rect[data-stat="sep"][data-layer="2"][data-head="1"]', "data-v"
    )
    norm_stats = head_statistics(norm_weights(cap), cap.tokens)
    assert float(v) == pytest.approx(norm_stats["sep"][2, 1], abs=1e-5)


def test_static_file_makes_no_request_but_itself(loaded, tiny_html):
    page = loaded
    for view in ("model", "neuron", "stats", "head"):
        page.click(f'.tab[data-view="{view}"]')
    page.select_option("#example", "1")
    wait_ready(page, 1)
    assert page.requests == [tiny_html.as_uri()]
