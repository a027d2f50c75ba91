"""Static SVG exports readable at any length: max-pooled model maps keep the [SEP]
columns and the diagonal at 300 tokens, thinned tick labels, a colour bar stating
its range in every heat-map view, and bands (title, legend, colour bars, plots)
that never overlap for 1 head x 1 layer up to 16 heads x 24 layers.

Captures are synthetic (numpy; no model); geometry is read from the SVG as the
browser lays it out (getBBox), in the session's Chromium.
"""

from __future__ import annotations

import base64
import dataclasses
import xml.etree.ElementTree as ET
import zlib

import numpy as np
import pytest

from jaxattn.capture import Capture
from jaxattn.errors import UsageError
from jaxattn.quantities import HEAD_STATS
from jaxattn.views import to_svg
from jaxattn.views.drawing import fmt, thin_ticks

SVG = "{http://www.w3.org/2000/svg}"
T_LONG, SEPS = 300, (150, 299)


def synthetic(n_layers: int, n_heads: int, t: int, seed: int = 0) -> Capture:
    """A capture with every quantity the views draw: a weak random background (0.2 of
    each row), 0.3 on each [SEP] column and 0.2 on the diagonal."""
    rng = np.random.default_rng(seed)
    seps = (t // 2, t - 1)
    tokens = ["[CLS]"] + [f"w{i}" for i in range(1, t)]
    for s in seps:
        tokens[s] = "[SEP]"
    back = rng.random((n_layers, n_heads, t, t))
    att = 0.2 * back / back.sum(-1, keepdims=True)
    att[..., list(seps)] += 0.3
    att[..., np.arange(t), np.arange(t)] += 0.2
    qk = rng.standard_normal((2, n_layers, n_heads, t, 8)).astype(np.float32)
    norm = att * rng.uniform(0.5, 2.0, (n_layers, n_heads, 1, t))
    tensors = {
        "attention": att.astype(np.float32),
        "alpha_fx_norm": norm.astype(np.float32),
        "queries": qk[0],
        "keys": qk[1],
    }
    return Capture(
        tokens=tuple(tokens),
        sentence_b_start=seps[0] + 1,
        layers=tuple(range(n_layers)),
        heads=tuple(range(n_heads)),
        dtype="float32",
        tensors=tensors,
    )


def decode_png(href: str) -> np.ndarray:
    """[H, W, 4] of a data: URL PNG as `drawing.png_bytes` writes it (filter 0 rows)."""
    data = base64.b64decode(href.split(",", 1)[1])
    w, h = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    idat = data[data.index(b"IDAT") + 4 : data.index(b"IEND") - 8]
    rows = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, 1 + 4 * w)
    assert (rows[:, 0] == 0).all()
    return rows[:, 1:].reshape(h, w, 4)


@pytest.fixture(scope="module")
def long_cap() -> Capture:
    return synthetic(1, 2, T_LONG)


def test_model_svg_keeps_sep_columns_and_diagonal_at_300_tokens(long_cap):
    root = ET.fromstring(to_svg(long_cap, "model", thumb=72))
    images = list(root.iter(SVG + "image"))
    assert len(images) == 2
    for im in images:
        res = int(im.get("data-res"))
        assert res == 72 < T_LONG  # pooled, 300 -> 72 px
        px = decode_png(im.get("href"))[..., 0].astype(int)  # red: 255 white, low = strong
        edges = np.floor(np.linspace(0, T_LONG, res + 1)).astype(int)
        cols = [np.searchsorted(edges, s, "right") - 1 for s in SEPS]
        for c in cols:  # every row of each [SEP] column is drawn strong (0.5 of a 0.7 max)
            assert px[:, c].max() < 140, px[:, c].max()
        assert (np.diag(px) < 200).all()  # the diagonal (0.2 + background), visible
        plain = np.setdiff1d(np.arange(res), cols)
        off = px[:, plain][~np.eye(res, dtype=bool)[:, plain]]
        assert np.median(off) > 235  # the background stays near white
    bar = next(g for g in root.iter(SVG + "g") if g.get("class") == "colorbar")
    w = long_cap.attention
    assert float(bar.get("data-min")) == 0 and float(bar.get("data-max")) == pytest.approx(w.max())
    ticks = [e.text for e in bar.iter(SVG + "text") if e.get("class") == "cb-tick"]
    assert ticks == ["0", fmt(float(w.max()))]
    # token ticks: both [SEP]s labelled, at least 11 px apart (72 px / 300 tokens)
    picked = thin_ticks(long_cap.tokens, 72 / T_LONG)
    assert set(SEPS) <= set(picked) and min(np.diff(picked)) * 72 / T_LONG >= 11
    labels = [e.text for e in root.iter(SVG + "text") if e.get("class") == "tick"]
    assert labels.count("[SEP]") == 2 * 2 * 1 + 2 * 1  # keys under 2 maps, queries by 1 row


def test_every_heat_map_view_has_colour_bars_with_their_range():
    cap = synthetic(2, 3, 7)
    stats = len(HEAD_STATS)  # one grid per head statistic
    for view, opts, n_bars in (
        ("neuron", dict(layer=1, head=2, token=3), 4),
        ("stats", dict(kind="norm"), stats),
        ("model", {}, 1),
    ):
        root = ET.fromstring(to_svg(cap, view, **opts))
        bars = [g for g in root.iter(SVG + "g") if g.get("class") == "colorbar"]
        assert len(bars) == n_bars, view
        for g in bars:
            lo, hi = float(g.get("data-min")), float(g.get("data-max"))
            ticks = [e.text for e in g.iter(SVG + "text") if e.get("class") == "cb-tick"]
            assert lo < hi and ticks[:2] == [fmt(lo), fmt(hi)], (view, ticks)
    neuron = ET.fromstring(to_svg(cap, "neuron", layer=1, head=2, token=3))
    stated = {
        g.find(SVG + "text").text: float(g.get("data-max"))
        for g in neuron.iter(SVG + "g")
        if g.get("class") == "colorbar"
    }
    dot = cap.queries[1, 2, 3].astype(np.float64) @ cap.keys[1, 2].T.astype(np.float64)
    assert stated["q · k"] == pytest.approx(dot.max(), rel=1e-5)


def test_neuron_svg_indices_lines_and_sentences():
    """The static neuron view: every token's position index on both sides, one line per key
    from the selected query with stroke-opacity = its softmax weight, sentence A/B marked."""
    cap = synthetic(2, 3, 9)  # sentence B starts at token 5
    root = ET.fromstring(to_svg(cap, "neuron", layer=1, head=2, token=3))
    texts = list(root.iter(SVG + "text"))
    for side in ("query", "key"):
        idx = [e for e in texts if e.get("class") == "idx" and e.get("data-side") == side]
        assert [int(e.text) for e in idx] == [int(e.get("data-idx")) for e in idx] == [*range(9)]
    lines = [e for e in root.iter(SVG + "line") if e.get("class") == "nv-line"]
    assert [int(e.get("data-j")) for e in lines] == [*range(9)]  # one per key, all keys
    assert {e.get("data-i") for e in lines} == {"3"} and len({e.get("y1") for e in lines}) == 1
    s = cap.keys[1, 2].astype(np.float64) @ cap.queries[1, 2, 3].astype(np.float64) / np.sqrt(8)
    w = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
    for attr in ("stroke-opacity", "data-w"):
        np.testing.assert_allclose([float(e.get(attr)) for e in lines], w, atol=5e-5)
    assert sorted(e.get("data-sentence") for e in texts if e.get("class") == "sentence") == [
        "A",
        "B",
    ]
    (edge,) = [e for e in root.iter(SVG + "line") if e.get("class") == "ab-boundary"]
    key_y = {
        int(e.get("data-idx")): float(e.get("y"))
        for e in texts
        if e.get("class") == "idx" and e.get("data-side") == "key"
    }
    assert edge.get("data-row") == "5" and key_y[4] < float(edge.get("y1")) < key_y[5]
    single = dataclasses.replace(cap, sentence_b_start=None)
    plain = to_svg(single, "neuron", layer=1, head=2, token=3)
    assert 'class="sentence"' not in plain and "ab-boundary" not in plain


def test_negative_indices_count_from_the_end_as_in_every_selection():
    cap = synthetic(2, 3, 7)
    assert to_svg(cap, "head", layer=-1, heads=[-1, 0]) == to_svg(
        cap, "head", layer=1, heads=[2, 0]
    )
    neuron = to_svg(cap, "neuron", layer=-2, head=-1, token=-1)
    assert neuron == to_svg(cap, "neuron", layer=0, head=2, token=6)


@pytest.mark.parametrize(
    "view, opts, match",
    [
        ("head", dict(layer=2), r"layer 2 is out of range: an index into cap.layers \(0..1, or"),
        ("head", dict(layer=-3), r"layer -3 is out of range: .*\(0..1, or -2..-1 from the end\)"),
        ("head", dict(heads=[0, 5]), "head 5 is out of range"),
        ("neuron", dict(token=7), "token 7 is out of range"),
        ("model", dict(kind="nrm"), "unknown kind 'nrm'; choose from attention, norm"),
        ("model", dict(layer=0), "the model view takes no layer; its options: kind, thumb"),
    ],
)
def test_static_bad_input_is_one_line(view, opts, match):
    with pytest.raises(UsageError, match=match) as e:
        to_svg(synthetic(2, 3, 7), view, **opts)
    assert "\n" not in str(e.value)


OVERLAPS = """svg => {
  const boxes = [...svg.children].filter(e => e.tagName === 'g').map(g => {
    const b = g.getBBox();
    return [g.getAttribute('class'), b.x, b.y, b.x + b.width, b.y + b.height];
  });
  const bad = [];
  const W = +svg.getAttribute('width'), H = +svg.getAttribute('height');
  boxes.forEach((a, i) => {
    if (a[1] < -0.5 || a[2] < -0.5 || a[3] > W + 0.5 || a[4] > H + 0.5) bad.push(['outside', a]);
    boxes.slice(i + 1).forEach(b => {
      if (a[1] < b[3] && b[1] < a[3] && a[2] < b[4] && b[2] < a[4]) bad.push([a, b]);
    });
  });
  return {classes: boxes.map(b => b[0]), bad};
}"""


@pytest.mark.parametrize("n_heads, n_layers", [(1, 1), (16, 24)])
def test_static_layout_has_no_overlaps(page, n_heads, n_layers):
    cap = synthetic(n_layers, n_heads, 12, seed=n_heads)
    for view, opts in (("head", {}), ("model", {}), ("neuron", {}), ("stats", {})):
        page.set_content(f"<!doctype html><body style='margin:0'>{to_svg(cap, view, **opts)}")
        got = page.eval_on_selector("svg", OVERLAPS)
        assert not got["bad"], (view, got["bad"])
        assert {"title", "plot"} <= set(got["classes"]) and "colorbar" in got["classes"], view
        if view == "head":
            assert "legend" in got["classes"]


def test_png_pixels_of_sep_columns(page, long_cap):
    """The rendered model view (Chromium, as write_png draws it): [SEP] columns dark."""
    svg = to_svg(long_cap, "model", thumb=72)
    page.set_content(f"<!doctype html><body style='margin:0'>{svg}")
    red = page.evaluate("""async () => {
      const im = document.querySelector('image');
      const x = +im.getAttribute('x'), y = +im.getAttribute('y'), s = +im.getAttribute('width');
      const svg = document.querySelector('svg'), img = new Image();
      img.src = 'data:image/svg+xml;base64,' + btoa(unescape(encodeURIComponent(svg.outerHTML)));
      await img.decode();
      const c = document.createElement('canvas'); c.width = svg.width.baseVal.value;
      c.height = svg.height.baseVal.value; const g = c.getContext('2d'); g.drawImage(img, 0, 0);
      const px = g.getImageData(x, y, s, s).data, red = [];
      for (let r = 0; r < s; r++) { const row = []; for (let k = 0; k < s; k++)
        row.push(px[4 * (r * s + k)]); red.push(row); }
      return red; }""")
    px = np.array(red)
    for s in SEPS:
        col = min(71, int((s + 0.5) * 72 / T_LONG))
        assert px[:, col].max() < 150, (s, px[:, col].max())
    assert np.median(px) > 235


def test_an_example_past_the_input_is_named_with_the_valid_range(tmp_path, capsys):
    from jaxattn.cli import main

    saved = tmp_path / "one.npz"
    synthetic(1, 2, 5).save(saved)
    out = tmp_path / "x.svg"
    assert main(["view", str(saved), "--views", "head", "--example", "7", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--example 7: index 7 is out of range: INPUT holds 1 example (0..0, or -1..-1)" in err
    assert not out.exists()


def test_the_summary_names_the_one_example_a_static_export_draws(tmp_path, capsys):
    from jaxattn.cli import main

    saved = [tmp_path / "a.npz", tmp_path / "b.npz"]
    synthetic(1, 2, 5).save(saved[0])
    synthetic(1, 2, 7, seed=1).save(saved[1])
    out = tmp_path / "x.svg"
    argv = ["view", *map(str, saved), "--views", "head", "--out", str(out)]
    assert main([*argv, "--example", "1"]) == 0
    assert f"wrote {out} (svg: head; example 1)" in capsys.readouterr().out
    assert ">w5<" in out.read_text()  # b's tokens: a has no w5


def test_a_static_export_reads_the_examples_up_to_the_one_it_draws(tmp_path, monkeypatch):
    """Past an HTML page's cap (--max-examples) too: it was refused ('brings the examples
    to 3, over the page's cap of 2'), after reading up to the cap."""
    from store_helpers import captures, write_store

    from jaxattn.cli import main
    from jaxattn.store import Store

    caps = captures(5)
    write_store(tmp_path / "s.zarr", caps)
    read, real = [], Store.read
    monkeypatch.setattr(Store, "read", lambda self, i, w=None: read.append(i) or real(self, i, w))
    out = tmp_path / "x.svg"
    argv = ["view", str(tmp_path / "s.zarr"), "--views", "model", "--out", str(out)]
    assert main([*argv, "--example", "2", "--max-examples", "2"]) == 0
    assert read == [0, 1, 2]
    assert f">{caps[2].tokens[1]}<" in out.read_text()
    read.clear()
    assert main([*argv, "--example", "-1", "--overwrite"]) == 0  # from the end: all
    assert read == [0, 1, 2, 3, 4] and f">{caps[4].tokens[1]}<" in out.read_text()


def test_a_page_of_two_models_stores_is_refused_naming_both(tmp_path, monkeypatch, capsys):
    """One page draws one model's captures, as `view --global` maps them: two stores
    dumped with different weights were drawn as one page, silently."""
    import store_helpers
    from store_helpers import INFO, captures, write_store

    from jaxattn.cli import main

    caps = captures(2)
    write_store(tmp_path / "a.zarr", caps)
    write_store(tmp_path / "same.zarr", captures(2, seed=1))
    other = dataclasses.replace(INFO, name="other-bert", weights="blake2b:fedcba9876543210")
    monkeypatch.setattr(store_helpers, "INFO", other)
    write_store(tmp_path / "b.zarr", caps)
    a, b, same = (str(tmp_path / n) for n in ("a.zarr", "b.zarr", "same.zarr"))
    out = tmp_path / "x.html"
    for mode in ([], ["--stats-first"]):
        assert main(["view", *mode, a, b, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (  # fingerprints cut to 20 characters
            f"jaxattn view: error: INPUT {b} comes from other-bert, weights "
            f"blake2b:fedcba987654, INPUT {a} from {INFO.name}, weights "
            "blake2b:0123456789ab: view the captures of one model together"
        )
        assert not out.exists()
    assert main(["view", a, same, "--out", str(out)]) == 0  # one model's stores: one page
    assert "4 example(s)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["--stats-first", "{a}", "{b}"],  # was "invalid choice: '{a}'"
        ["--stats-first", "{a}", "{b}", "--segment", "2"],
        ["{a}", "--stats-first", "{b}"],
        ["{a}", "{b}", "--stats-first"],
        ["--stats-first", "maps", "{a}", "{b}"],
    ],
)
def test_stats_first_before_its_inputs_takes_them_as_inputs(tmp_path, capsys, argv):
    from store_helpers import captures, write_store

    from jaxattn.cli import main

    def rows(caps):  # attention rows that sum to 1
        out = []
        for c in caps:
            e = np.exp(c.attention)
            att = (e / e.sum(-1, keepdims=True)).astype(np.float32)
            out.append(dataclasses.replace(c, tensors={**c.tensors, "attention": att}))
        return out

    a, b = tmp_path / "a.zarr", tmp_path / "b.zarr"
    write_store(a, rows(captures(2)))
    write_store(b, rows(captures(3, seed=1)))
    argv = [w.format(a=a, b=b) for w in argv]
    out = tmp_path / "x.html"
    assert main(["view", *argv, "--out", str(out)]) == 0
    got = capsys.readouterr().out
    assert "statistics along the text; 5 example(s)" in got, got


def test_a_misspelt_stats_first_value_is_refused_with_the_nearest(tmp_path, capsys):
    from jaxattn.cli import main

    for word, near in (("statistcs", "statistics"), ("Maps", "maps")):
        out = str(tmp_path / "x.html")
        assert main(["view", "a text", "--stats-first", word, "--out", out]) == 2
        err = capsys.readouterr().err
        assert f"--stats-first: invalid choice: '{word}': did you mean '{near}'?" in err


def test_a_page_of_saved_captures_without_attention_says_what_to_capture(tmp_path, capsys):
    """Not the Python API's "views need the 'attention' quantity (what=(...))"."""
    from jaxattn.cli import main

    cap = synthetic(1, 2, 5)
    saved = tmp_path / "stats.npz"
    dataclasses.replace(cap, tensors={"queries": cap.queries, "keys": cap.keys}).save(saved)
    assert main(["view", str(saved), "--out", str(tmp_path / "x.html")]) == 2
    assert capsys.readouterr().err.strip() == (
        "jaxattn view: error: INPUT holds keys, queries; jaxattn view needs attention: "
        "capture it again with --what keys,queries,attention"
    )
