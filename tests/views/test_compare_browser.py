"""`jaxattn view --compare` of two tiny models with a known difference, and its page in Chromium.

Model B is the tiny BERT with layer 1 head 1's query weights and bias scaled by 3:
layer 0 and the other heads of layer 1 see the same inputs and weights, so their
attention is identical; head 1 of layer 1 differs, and every head after it too.
"""

from __future__ import annotations

import json
import re
import shutil
import zlib

import numpy as np
import pytest
from views_helpers import screenshot, wait_ready

from jaxattn.cli import main
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
    assert page.text_content("#cmp-min") == f"{-m:.4f}"
    assert page.text_content("#cmp-max") == f"+{m:.4f}"
    panels = (("cmp-a", lambda i, j: grey(a[i, j])), ("cmp-b", lambda i, j: grey(b[i, j])),
              ("cmp-diff", lambda i, j: diverging(b[i, j] - a[i, j], m)))  # fmt: skip
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
