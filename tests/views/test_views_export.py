"""Python-side views: the data encoding, the page's isolation, static SVG/PNG, the CLI."""

from __future__ import annotations

import dataclasses
import json
import re
import struct
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from hf_fixtures import EXAMPLE_A, EXAMPLE_B
from views_helpers import ARTIFACTS, norm_weights

from jaxattn import views
from jaxattn.capture import Capture
from jaxattn.cli import main
from jaxattn.errors import UsageError
from jaxattn.views import View, build_html, to_svg
from jaxattn.views.payload import build_payload, decode_array, encode_array

SVG = "{http://www.w3.org/2000/svg}"


def test_array_encoding_round_trips():
    x = np.random.default_rng(0).random((2, 3, 5, 5)).astype(np.float32)
    np.testing.assert_array_equal(decode_array(encode_array(x, "f4")), x)
    np.testing.assert_allclose(decode_array(encode_array(x, "u1")), x, atol=1 / 510 + 1e-7)


def test_payload_precision_and_kinds(tiny_caps):
    cap = tiny_caps[1]
    doc = build_payload(tiny_caps, embed="float32", labels=["one", "two"])
    ex = doc["examples"][1]
    assert ex["label"] == "two" and ex["tokens"] == list(cap.tokens)
    assert ex["sentence_b_start"] == cap.sentence_b_start
    np.testing.assert_array_equal(decode_array(ex["weights"]["attention"]), cap.attention)
    np.testing.assert_allclose(decode_array(ex["weights"]["norm"]), norm_weights(cap), rtol=1e-6)
    np.testing.assert_array_equal(decode_array(ex["queries"]), cap.queries)
    small = build_payload(cap, views=("head",), embed="uint8")["examples"][0]
    assert small["weights"]["attention"]["dtype"] == "u1" and "queries" not in small
    with pytest.raises(UsageError, match="unknown views"):
        build_payload(cap, views=("heads",))


def test_html_is_self_contained(tiny_caps):
    html = build_html(tiny_caps, title="</script><b>x")
    assert "default-src 'none'" in html  # the CSP: the page may fetch nothing
    lowered = html.lower()
    for needle in ("<script src", "<link", "@import", "url(", "https://"):
        assert needle not in lowered
    # "http://" only as the SVG namespace of createElementNS
    assert html.count("http://") == html.count("http://www.w3.org/2000/svg")
    assert "</script><b>" not in html  # the title is escaped
    assert build_html(tiny_caps[0]).startswith("<!doctype html>")
    frame = View(tiny_caps[0], views=("head",))._repr_html_()
    assert frame.startswith("<iframe srcdoc=") and 'sandbox="allow-scripts"' in frame


HOSTILE = ("[CLS]", "</script><script>alert(1)</script>", "a\u2028b\u2029c", "x\ud800y", "[SEP]")


def test_hostile_text_stays_text_and_the_page_is_utf8(tmp_path):
    """Tokens, labels and a title with "</script>", U+2028/2029 (line ends to old JS)
    and a lone surrogate (a non-UTF-8 file name's byte as Python reads it): the page
    and the SVG are written as UTF-8, no script element ends early, and the embedded
    JSON gives back each token as it was."""
    a = np.full((1, 1, 5, 5), 0.2, np.float32)
    cap = Capture(
        tokens=HOSTILE,
        sentence_b_start=None,
        layers=(0,),
        heads=(0,),
        dtype="float32",
        tensors={"attention": a},
    )
    label, title = "<img src=x onerror=alert(1)> \udcff", "run \udcff </title>"
    out = tmp_path / "hostile.html"
    views.write_html(out, cap, views=("head",), labels=[label], title=title)
    text = out.read_bytes().decode("utf-8")  # strict: no surrogate was written
    assert text.count("<script") == text.count("</script>") == 4  # data, bin, mount, views
    assert "<img" not in text and "\u2028" not in text and "\u2029" not in text
    assert "<title>run \ufffd &lt;/title&gt;</title>" in text
    data = re.search(r'id="jaxattn-data">(.*?)</script>', text, re.S)[1]
    strings = set(re.findall(r'"(?:[^"\\]|\\.)*"', data))
    decoded = {json.loads(s) for s in strings}
    assert set(HOSTILE) <= decoded and label in decoded  # as they were, surrogate too
    svg = to_svg(cap, "head")
    root = ET.fromstring(svg.encode("utf-8"))
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert any(t.startswith("</script><script>") for t in texts)  # drawn, shortened
    assert "x\ufffdy" in texts and "a\u2028b\u2029c" in texts


def test_views_import_no_jax(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("jax", "jaxlib", "flax", "torch"):
                    raise ImportError(name)
        sys.meta_path.insert(0, Block())
        import numpy as np
        from jaxattn.capture import Capture
        from jaxattn import views
        a = np.full((1, 1, 4, 4), 0.25, np.float32)
        cap = Capture(tokens=("[CLS]", "a", ".", "[SEP]"), sentence_b_start=None, layers=(0,),
                      heads=(0,), dtype="float32", tensors={{"attention": a}})
        views.write_html({str(tmp_path / "x.html")!r}, cap)
        views.to_svg(cap, "model")
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_head_svg_lines_match(tiny_caps):
    cap = tiny_caps[1]
    root = ET.fromstring(to_svg(cap, "head", layer=1, heads=[0, 2], kind="norm"))
    w = norm_weights(cap)[1]
    lines = list(root.iter(SVG + "line"))
    for e in lines:  # opacity = weight / heads drawn, as BertViz and the page
        assert abs(float(e.get("stroke-opacity")) - float(e.get("data-w")) / 2) <= 1e-4
    got = {
        (int(e.get("data-i")), int(e.get("data-j")), int(e.get("data-head"))): float(
            e.get("data-w")
        )
        for e in lines
    }
    t = cap.length
    want = {(i, j, h): w[h, i, j] for h in (0, 2) for i in range(t) for j in range(t)}
    assert got.keys() == want.keys()
    assert max(abs(got[k] - want[k]) for k in want) <= 5e-5  # 4 decimals
    texts = [e.text for e in root.iter(SVG + "text")]
    assert texts.count("[SEP]") == 4  # two per column in a pair


def test_model_neuron_stats_svg(tiny_caps):
    cap = tiny_caps[1]
    root = ET.fromstring(to_svg(cap, "model"))
    assert len(list(root.iter(SVG + "image"))) == len(cap.layers) * len(cap.heads)
    neuron = ET.fromstring(to_svg(cap, "neuron", layer=2, head=1, token=3))
    labels = [e.text for e in neuron.iter(SVG + "text")]
    assert "softmax" in labels and "q · k" in labels
    stats = ET.fromstring(to_svg(cap, "stats", kind="norm"))
    assert "Kovaleva class" in [e.text for e in stats.iter(SVG + "text")]
    with pytest.raises(UsageError, match="unknown view"):
        to_svg(cap, "heads")
    with pytest.raises(UsageError, match="queries"):
        to_svg(_attention_only(cap), "neuron")


def _attention_only(cap: Capture) -> Capture:
    kw = dict(tokens=cap.tokens, sentence_b_start=cap.sentence_b_start, layers=cap.layers)
    return Capture(**kw, heads=cap.heads, dtype=cap.dtype, tensors={"attention": cap.attention})


def test_empty_or_lacking_captures_say_how_to_get_what_is_missing(tiny_caps):
    """Issue 15's bad input: one line naming what is missing and how to get it."""
    cap = _attention_only(tiny_caps[1])
    empty = dataclasses.replace(
        cap, tokens=(), sentence_b_start=None, tensors={"attention": cap.attention[..., :0, :0]}
    )
    no_att = dataclasses.replace(cap, tensors={"alpha_fx_norm": cap.attention})
    for make, match in (
        (lambda: to_svg(empty, "head"), "the capture has no tokens: capture a non-empty text"),
        (lambda: build_html(empty), "the capture has no tokens: capture a non-empty text"),
        (lambda: build_payload(empty), "the capture has no tokens"),
        (lambda: to_svg(cap, "stats", kind="norm"), r"no 'alpha_fx_norm' .*what=\(\.\.\., "),
        (lambda: to_svg(cap, "model", kind="norm"), r"'alpha_fx_norm' was not captured.*what="),
        (lambda: build_html(no_att), r"views need the 'attention' quantity \(what="),
    ):
        with pytest.raises(UsageError, match=match) as e:
            make()
        assert "\n" not in str(e.value)


def test_cli_inputs(tmp_path, tiny_caps):
    from jaxattn.cli.corpus import read_inputs

    f = tmp_path / "in.txt"
    f.write_text("a b\n\nc ||| d\ne\tf\n", encoding="utf-8")
    tiny_caps[0].save(tmp_path / "c.npz")
    items = read_inputs(["x ||| y", str(f), str(tmp_path / "c.npz"), "plain"])
    assert items[:5] == [("x", "y"), "a b", ("c", "d"), ("e", "f"), items[4]]
    assert isinstance(items[4], Capture) and items[4].tokens == tiny_caps[0].tokens
    assert items[5] == "plain"


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_cli_writes_html_svg_png(
    tiny_caps, engines, bert_checkpoint, tmp_path, monkeypatch, browser
):
    import jaxattn

    # the session's engine, not a second load and compile of the same checkpoint
    monkeypatch.setattr(jaxattn, "load", lambda path=None: engines["bert"])
    texts = tmp_path / "texts.txt"
    texts.write_text(f"\n{EXAMPLE_A}\t{EXAMPLE_B}\n\n", encoding="utf-8")
    saved = tmp_path / "cap.npz"
    tiny_caps[1].save(saved)
    out = tmp_path / "v.html"
    # one sentence and one pair: the shapes the session already compiled
    args = ["view", EXAMPLE_A, str(texts), str(saved), "--model", str(bert_checkpoint)]
    assert main([*args, "--out", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    assert html.count('"label":') == 3 and "jaxattn-data" in html
    svg = tmp_path / "head.svg"
    assert main(["view", str(saved), "--layers", "2", "--heads", "0,1", "--out", str(svg)]) == 0
    lines = list(ET.parse(svg).getroot().iter(SVG + "line"))
    assert {e.get("data-head") for e in lines} == {"0", "1"}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for view in ("head", "neuron"):  # a browser start each: the others as SVG above
        png = ARTIFACTS / f"export_{view}.png"
        assert main(["view", str(saved), "--views", view, "--out", str(png), "--overwrite"]) == 0
        w, h = png_size(png)
        assert w > 200 and h > 100
    svg.unlink()
    assert main(["view", str(saved), "--views", "head,model", "--out", str(svg)]) == 2
    assert main(["view", str(saved), "--layers", "7", "--out", str(svg)]) == 2
