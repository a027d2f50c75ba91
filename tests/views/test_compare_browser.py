"""`jaxattn view --compare` of two tiny models with a known difference, and its page in Chromium.

Model B is the tiny BERT with layer 1 head 1's query weights and bias scaled by 3:
layer 0 and the other heads of layer 1 see the same inputs and weights, so their
attention is identical; head 1 of layer 1 differs, and every head after it too.

uint8 pages (A and B in 1/255 steps) carry the difference itself: decoded here and drawn
for a tf32-sized difference.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import zlib

import numpy as np
import pytest
from test_compare import causal_rows, fake, random_rows
from views_helpers import screenshot, wait_ready

from jaxattn.cli import main
from jaxattn.views.compare import pair_example
from jaxattn.views.compare_page import build_compare_html
from jaxattn.views.page import decode_text
from jaxattn.views.payload import unpack_array

LAYER, HEAD = 1, 1
TEXTS = ["I went to the store.", "The cat sat on the mat."]
PIXELS = """([id, pts]) => { const g = document.getElementById(id).getContext('2d');
  return pts.map(([x, y]) => Array.from(g.getImageData(x, y, 1, 1).data.slice(0, 3))); }"""


def changed_checkpoint(src, dst):
    """A copy of checkpoint `src` with layer LAYER head HEAD's query weight and bias times 3."""
    from safetensors.numpy import load_file, save_file

    shutil.copytree(src, dst)
    weights = load_file(str(dst / "model.safetensors"))
    config = json.loads((dst / "config.json").read_text())
    k = config["hidden_size"] // config["num_attention_heads"]
    for part in ("weight", "bias"):
        name = next(n for n in weights if f"layer.{LAYER}.attention.self.query.{part}" in n)
        weights[name] = weights[name].copy()
        weights[name][HEAD * k : (HEAD + 1) * k] *= 3.0
    save_file(weights, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


def read_page(path) -> tuple[dict, list[dict]]:
    """(header, per example {"a": [L, H, T, T], "b": ...}): the page's data decoded here."""
    text = path.read_text(encoding="utf-8")
    header = json.loads(re.search(r'id="jaxattn-data">(.*?)</script>', text, re.S).group(1))
    blob = re.search(r'id="jaxattn-bin">(.*?)</script>', text, re.S).group(1)
    arrays = []
    for e in header["examples"]:
        a, b, n = e["section"]
        raw = zlib.decompress(decode_text(blob[a:b], n), -15)
        arrays.append({k: unpack_array(d, raw) for k, d in e["arrays"].items()})
    return header, arrays


@pytest.fixture(scope="module")
def compared(bert_checkpoint, engines, tmp_path_factory):
    """(page path, A's and B's attention per text, computed here with each model's engine)."""
    import jaxattn

    d = tmp_path_factory.mktemp("compare")
    changed = changed_checkpoint(bert_checkpoint, d / "changed")
    out = d / "cmp.html"
    argv = ["view", *TEXTS, "--compare", str(bert_checkpoint), str(changed), "--out", str(out)]
    assert main(argv) == 0
    ref_a = [c.attention for c in engines["bert"].capture(TEXTS)]
    ref_b = [c.attention for c in jaxattn.load(changed).capture(TEXTS)]
    return out, ref_a, ref_b


def test_known_difference(compared):
    out, ref_a, ref_b = compared
    header, arrays = read_page(out)
    assert header["embed"] == "float32" and len(header["examples"]) == 2
    for e, got, a, b in zip(header["examples"], arrays, ref_a, ref_b, strict=True):
        assert e["level"] == "token" and e["layers"] == [0, 1, 2] and e["heads"] == [0, 1, 2]
        np.testing.assert_array_equal(got["a"], a)
        np.testing.assert_array_equal(got["b"], b)
        d = b.astype(np.float64) - a
        mean_abs, max_abs = np.asarray(e["summary"]["mean_abs"]), np.asarray(e["max_abs"])
        np.testing.assert_allclose(mean_abs, np.abs(d).mean((-2, -1)), atol=1e-7)
        np.testing.assert_allclose(max_abs, np.abs(d).max((-2, -1)), atol=1e-7)
        assert (mean_abs[0] == 0).all() and (mean_abs[LAYER, [0, 2]] == 0).all()
        assert mean_abs[LAYER, HEAD] > 1e-3 and (mean_abs[2] > 0).all()
        js = np.asarray(e["summary"]["js"])
        assert (js[0] == 0).all() and js[LAYER].argmax() == HEAD


def grey(v):
    g = round(255 * (1 - v))
    return [g, g, g]


def diverging(d, m):
    t = max(-1.0, min(1.0, d / m))
    s = round(255 * (1 - abs(t)))
    return [255, s, s] if t >= 0 else [s, s, 255]


def to_precision(x: float, digits: int = 3) -> str:
    """JavaScript's Number.prototype.toPrecision (ECMA-262): fixed unless the exponent is
    below -6 or at least `digits`."""
    if x == 0:
        return f"{0:.{digits - 1}f}"
    mantissa, exp = f"{x:.{digits - 1}e}".split("e")
    e = int(exp)
    if e < -6 or e >= digits:
        return f"{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"
    return f"{x:.{digits - 1 - e}f}"


def centres(page, canvas, n):
    box = page.eval_on_selector(
        f"#{canvas}", "c => [+c.dataset.ox, +c.dataset.oy, +c.dataset.cell]"
    )
    ox, oy, c = box
    return [(ox + j * c + c // 2, oy + i * c + c // 2) for i in range(n) for j in range(n)], box


def test_page_panels_hover_and_overview(compared, page):
    out, ref_a, ref_b = compared
    page.goto(out.as_uri())
    wait_ready(page)
    assert page.text_content("#cmp-side-b").startswith("B") and "changed" in page.text_content(
        "#cmp-side-b"
    )
    page.click(f'.cmp-cell[data-layer="{LAYER}"][data-head="{HEAD}"]')
    assert page.get_attribute("#jaxattn", "data-layer") == str(LAYER)
    assert page.get_attribute("#jaxattn", "data-head") == str(HEAD)
    assert page.input_value("#cmp-layer") == str(LAYER)
    a, b = ref_a[0][LAYER, HEAD].astype(np.float64), ref_b[0][LAYER, HEAD].astype(np.float64)
    t, m = len(a), np.abs(b - a).max()
    assert page.text_content("#cmp-min") == f"−{to_precision(m)}"
    assert page.text_content("#cmp-max") == f"+{to_precision(m)}"
    panels = (
        ("cmp-a", lambda i, j: grey(a[i, j])),
        ("cmp-b", lambda i, j: grey(b[i, j])),
        ("cmp-diff", lambda i, j: diverging(b[i, j] - a[i, j], m)),
    )
    for canvas, want in panels:
        points, _ = centres(page, canvas, t)
        got = np.array(page.evaluate(PIXELS, [canvas, points]))
        expected = np.array([want(i, j) for i in range(t) for j in range(t)])
        assert np.abs(got - expected).max() <= 1, canvas
    screenshot(page, "compare")

    points, (ox, oy, c) = centres(page, "cmp-a", t)
    box = page.query_selector("#cmp-a").bounding_box()
    i, j = 2, 3
    page.mouse.move(box["x"] + points[i * t + j][0], box["y"] + points[i * t + j][1])
    for canvas in ("cmp-a", "cmp-b", "cmp-diff"):
        assert page.get_attribute(f"#{canvas}", "data-hi") == f"{i},{j}"
    edge = page.evaluate(PIXELS, ["cmp-b", [(ox + j * c - 1, oy + i * c + c // 2)]])[0]
    assert np.abs(np.array(edge) - [255, 140, 0]).max() <= 2  # the outline in B
    info = page.text_content("#cmp-info")
    assert f"A {a[i, j]:.4f}" in info and f"B {b[i, j]:.4f}" in info

    page.select_option("#example", "1")
    wait_ready(page, 1)
    assert page.input_value("#cmp-head") == str(HEAD)
    points, _ = centres(page, "cmp-b", len(ref_b[1][0, 0]))
    got = page.evaluate(PIXELS, ["cmp-b", points[:1]])[0]
    assert np.abs(np.array(got) - grey(ref_b[1][LAYER, HEAD][0, 0])).max() <= 1


def test_uint8_page_embeds_the_difference_per_head(tmp_path):
    """uint8 weights and B = A rounded to 1/255 (dtype=uint8), a tf32-sized change, a dense one."""
    rng = np.random.default_rng(5)
    tokens = ["[CLS]", "a", "b", "c", "d", "e", "[SEP]"]
    a = random_rows(rng, (2, 2, 7, 7))
    b = np.rint(a * 255) / 255  # layer 0: an output encoding's rounding, m ~ 0.002
    b[1, 0] = a[1, 0] * (1 + 1e-4 * rng.standard_normal((7, 7)))  # m ~ 1e-5
    b[1, 1] = random_rows(rng, (7, 7))
    layout = dict(layers=(0, 1), heads=(0, 1))
    pair = pair_example(
        0, fake(tokens, a, **layout), fake(tokens, b, **layout), "attention", "attention"
    )
    out = tmp_path / "u8.html"
    out.write_text(build_compare_html([pair], ("a", "b"), embed="uint8"), encoding="utf-8")
    header, arrays = read_page(out)
    got = (
        arrays[0]["d"].astype(np.float64) * arrays[0]["d_step"].astype(np.float64)[..., None, None]
    )
    exact = b.astype(np.float32).astype(np.float64) - a.astype(np.float64)
    m = np.abs(exact).max((-2, -1), keepdims=True)
    assert (np.abs(got - exact) <= m / 254).all()
    assert (got[np.abs(exact) > m / 254] != 0).all()  # no visible difference drawn as 0
    assert (np.abs(arrays[0]["a"] - a) <= 1 / 510 + 1e-7).all()  # A and B stay uint8
    np.testing.assert_allclose(header["examples"][0]["max_abs"], m[..., 0, 0], rtol=1e-6)


def test_uint8_page_draws_a_tiny_difference(page, tmp_path):
    """A tf32-sized difference (m ~ 1e-5) on a uint8 page: drawn from the embedded difference
    (A and B round alike to 1/255), colour bar and hover in 3 significant digits."""
    rng = np.random.default_rng(6)
    tokens = ["[CLS]", "a", "b", "c", "d", "[SEP]"]
    a = random_rows(rng, (6, 6))
    b = (a * (1 + 1e-4 * rng.standard_normal((6, 6)))).astype(np.float32)
    assert (np.rint(a * 255) == np.rint(b * 255)).mean() > 0.9  # what a B - A of uint8s draws
    pair = pair_example(0, fake(tokens, a), fake(tokens, b), "attention", "attention")
    out = tmp_path / "tiny.html"
    out.write_text(build_compare_html([pair], ("a", "b"), embed="uint8"), encoding="utf-8")
    _, arrays = read_page(out)
    drawn = arrays[0]["d"][0, 0].astype(np.float64) * float(arrays[0]["d_step"][0, 0])
    d = b.astype(np.float64) - a
    m = np.abs(d).max()
    page.goto(out.as_uri())
    wait_ready(page)
    assert page.text_content("#cmp-max") == f"+{to_precision(m)}" and "e-" not in to_precision(m)
    points, _ = centres(page, "cmp-diff", 6)
    got = np.array(page.evaluate(PIXELS, ["cmp-diff", points]))
    want = np.array([diverging(d[i, j], m) for i in range(6) for j in range(6)])
    assert np.abs(got - want).max() <= 2  # the quantised d is within m / 254: 1 colour level
    assert (got != 255).any(-1).sum() >= (np.abs(d) > m / 100).sum()
    i, j = np.unravel_index(np.abs(d).argmax(), d.shape)
    box = page.query_selector("#cmp-diff").bounding_box()
    page.mouse.move(box["x"] + points[i * 6 + j][0], box["y"] + points[i * 6 + j][1])
    sign = "+" if drawn[i, j] >= 0 else "−"
    assert f"B − A {sign}{to_precision(abs(drawn[i, j]))}" in page.text_content("#cmp-info")


def test_long_examples_thin_their_labels(page, tmp_path):
    """122 tokens at 4 px a cell: labels 11 px apart ([CLS] and [SEP] among them, as the
    static exports' thin_ticks), and a hovered row's own label always drawn."""
    from jaxattn.views.drawing import thin_ticks

    rng = np.random.default_rng(7)
    tokens = ["[CLS]", *(f"w{i}" for i in range(120)), "[SEP]"]
    a, b = random_rows(rng, (122, 122)), random_rows(rng, (122, 122))
    pair = pair_example(0, fake(tokens, a), fake(tokens, b), "attention", "attention")
    out = tmp_path / "long.html"
    out.write_text(build_compare_html([pair], ("a", "b")), encoding="utf-8")
    page.goto(out.as_uri())
    wait_ready(page)
    canvas = page.query_selector("#cmp-a")
    cell = int(canvas.get_attribute("data-cell"))
    rows = [int(k) for k in canvas.get_attribute("data-row-labels").split(",")]
    assert rows == thin_ticks(tokens, cell) and {0, 121} <= set(rows)
    assert np.diff(rows).min() * cell >= 11 and len(rows) >= 122 // int(np.ceil(11 / cell))
    hovered = next(k for k in range(1, 121) if k not in rows)
    points, _ = centres(page, "cmp-a", 122)
    box = canvas.bounding_box()
    x, y = points[hovered * 122 + 5]
    page.mouse.move(box["x"] + x, box["y"] + y)
    shown = [int(k) for k in canvas.get_attribute("data-row-labels").split(",")]
    assert hovered in shown and all(abs(k - hovered) * cell >= 11 for k in shown if k != hovered)
    screenshot(page, "compare_122_tokens", full_page=False)
    assert not page.errors


def test_two_decoders_masked_future_is_grey_hatched_and_said(page, tmp_path):
    """Two decoders' page (provenance causal) draws each cell j > i as the model view
    draws the masked future, JX.MASKED grey (230) with darker hatch lines, not white, in
    all three panels; cells j <= i keep their weights; the page says what the grey is,
    and hovering a masked cell says it is masked. An encoder's page (the same weights,
    provenance not causal) keeps its zeros white."""
    rng = np.random.default_rng(8)
    t, tokens = 8, ["<s>", "a", "b", "c", "d", "e", "f", "g"]
    a, b = causal_rows(rng, (t, t)), causal_rows(rng, (t, t))
    decoder = dict(provenance={"causal": True})
    ca, cb = (dataclasses.replace(fake(tokens, x), **decoder) for x in (a, b))
    out = tmp_path / "decoders.html"
    pair = pair_example(0, ca, cb, "attention", "attention")
    out.write_text(build_compare_html([pair], ("a", "b")), encoding="utf-8")
    header, _ = read_page(out)
    assert header["examples"][0]["causal"] is True
    page.goto(out.as_uri())
    wait_ready(page)
    assert "sees only itself" in page.text_content("#cmp-causal-summary")
    level = page.text_content("#cmp-level")
    assert "itself and earlier tokens" in level and "grey triangle is the masked future" in level
    block = """([id, x, y, c]) => Array.from(document.getElementById(id).getContext('2d')
      .getImageData(x + 1, y + 1, c - 2, c - 2).data).filter((_, k) => k % 4 < 3)"""
    for canvas in ("cmp-a", "cmp-b", "cmp-diff"):
        assert page.get_attribute(f"#{canvas}", "data-causal") == "1"
        _, (ox, oy, c) = centres(page, canvas, t)
        for i, j in ((0, 1), (0, t - 1), (3, 4), (t - 2, t - 1)):
            px = np.array(page.evaluate(block, [canvas, ox + j * c, oy + i * c, c])).reshape(-1, 3)
            assert (px[:, 0] == px[:, 1]).all() and (px[:, 1] == px[:, 2]).all()  # grey
            assert (px[:, 0] < 255).all() and set(px[:, 0]) >= {230}  # no white: mask
            assert px[:, 0].min() <= 170  # and hatch lines
    points, _ = centres(page, "cmp-a", t)
    got = np.array(page.evaluate(PIXELS, ["cmp-a", points])).reshape(t, t, 3)
    for i in range(t):
        for j in range(i + 1):
            assert np.abs(got[i, j] - grey(a[i, j])).max() <= 1
    box = page.query_selector("#cmp-a").bounding_box()
    x, y = points[2 * t + 5]
    page.mouse.move(box["x"] + x, box["y"] + y)
    assert "b → e: masked (a later token" in page.text_content("#cmp-info")
    screenshot(page, "compare_two_decoders", full_page=False)
    encoder = tmp_path / "encoders.html"
    ea, eb = (dataclasses.replace(fake(tokens, x), provenance={"causal": False}) for x in (a, b))
    pair = pair_example(0, ea, eb, "attention", "attention")
    encoder.write_text(build_compare_html([pair], ("a", "b")), encoding="utf-8")
    page.goto(encoder.as_uri())
    wait_ready(page)
    assert page.get_attribute("#cmp-a", "data-causal") == "0"
    assert "Causal" not in page.text_content("#cmp-level")
    got = np.array(page.evaluate(PIXELS, ["cmp-a", points])).reshape(t, t, 3)
    assert (got[0, 1:] == 255).all()  # zero weights, white
