"""Decoder captures through the views (issue 30): the tiny GPT-2 and the tiny Llama
(grouped-query: H = 4 query heads read H_kv = 2 key/value heads).

The payload and the page's packed data say an example is causal, hold weights that are
exactly 0 for j > i, and map each query head to its key/value head (checked against
the hand-computed h // 2); the static head, model and neuron exports draw nothing in
the future and say so; the neuron view's softmax over j <= i is the captured attention
row; a ~1,100-token text gives well-formed, bounded outputs in bounded time.
"""

from __future__ import annotations

import base64
import dataclasses
import html.parser
import json
import re
import time
import xml.etree.ElementTree as ET
import zlib

import numpy as np
import pytest
from views_helpers import LONG_TOKENS

from jaxattn.capture import frozen
from jaxattn.errors import UsageError
from jaxattn.views import build_html, build_payload, to_svg
from jaxattn.views.page import decode_text
from jaxattn.views.payload import decode_array, is_causal, kv_heads, pack_page, unpack_array
from jaxattn.views.svg import HEAD_MAX_TOKENS, NEURON_MAX_KEYS, neuron_values

SVG = "{http://www.w3.org/2000/svg}"
FAMILIES = ("gpt2", "llama")
KV_HEADS = {"gpt2": [0, 1, 2], "llama": [0, 0, 1, 1]}  # by hand: h // (H / H_kv)
SIZE_BOUND = {"head": 2_000_000, "model": 1_500_000, "neuron": 1_000_000}
TIME_BOUND_S = 20.0  # one export or page of the long text, on a busy 2-core machine


def future(t: int) -> np.ndarray:
    return np.triu(np.ones((t, t), bool), 1)


def reference_norm(cap) -> np.ndarray:
    """‖αf‖ over j <= i, rows normalised (float64, from the capture's own array)."""
    x = np.where(future(cap.length), 0.0, cap.alpha_fx_norm.astype(np.float64))
    return x / x.sum(-1, keepdims=True)


def decode_png(href: str) -> np.ndarray:
    """[H, W, 4] of a data: URL PNG as `drawing.png_bytes` writes it (filter 0 rows)."""
    data = base64.b64decode(href.split(",", 1)[1])
    w, h = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    at, idat = 8, b""
    while at < len(data):
        n, tag = int.from_bytes(data[at : at + 4], "big"), data[at + 4 : at + 8]
        if tag == b"IDAT":
            idat += data[at + 8 : at + 8 + n]
        at += 12 + n
    rows = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, 1 + 4 * w)
    assert not rows[:, 0].any()
    return rows[:, 1:].reshape(h, w, 4)


@pytest.fixture(scope="module", params=FAMILIES)
def fam(request, decoder_caps):
    return request.param, *decoder_caps[request.param]


def test_a_decoder_capture_is_causal_and_maps_query_heads_to_key_value_heads(fam):
    name, short, long = fam
    for cap in (*short, long):
        assert is_causal(cap)
        assert kv_heads(cap) == KV_HEADS[name]
        # without its provenance (a server's capture): read from the attention's zeros
        bare = dataclasses.replace(cap, provenance=frozen())
        assert is_causal(bare)
    # an encoder-like capture: one weight above the diagonal
    cap = short[0]
    att = cap.attention.copy()
    att[0, 0, 0, 1] = 0.01
    tensors = dict(cap.tensors, attention=att)
    assert not is_causal(dataclasses.replace(cap, provenance=frozen(), tensors=tensors))


def test_the_payload_round_trips_without_the_future(fam):
    name, short, _ = fam
    doc = build_payload(short, views=("head", "model", "neuron"), embed="float32")
    for cap, ex in zip(short, doc["examples"], strict=True):
        t = cap.length
        assert ex["causal"] is True and ex["kv_heads"] == KV_HEADS[name]
        att = decode_array(ex["weights"]["attention"])
        norm = decode_array(ex["weights"]["norm"])
        assert not att[..., future(t)].any() and not norm[..., future(t)].any()
        np.testing.assert_array_equal(att, cap.attention)
        np.testing.assert_allclose(norm, reference_norm(cap), atol=1e-6)
        keys = decode_array(ex["keys"])
        assert keys.shape[1] == len(set(KV_HEADS[name]))
        np.testing.assert_array_equal(keys, cap.keys)
        np.testing.assert_array_equal(decode_array(ex["queries"]), cap.queries)
    json.dumps(doc)  # the web viewer's JSON


@pytest.mark.parametrize("embed", ["float32", "uint8"])
def test_the_page_data_round_trips_without_the_future(fam, embed):
    name, short, _ = fam
    header, sections = pack_page(short, views=("head", "model", "neuron"), embed=embed)
    tol = 0 if embed == "float32" else 1 / 510 + 1e-7
    for cap, entry, z in zip(short, header["examples"], sections, strict=True):
        raw = zlib.decompress(z, -15)
        assert entry["causal"] is True and entry["kv_heads"] == KV_HEADS[name]
        att = unpack_array(entry["arrays"]["attention"], raw)
        assert not att[..., future(cap.length)].any()  # exactly 0, uint8 too
        np.testing.assert_allclose(att, cap.attention, atol=tol, rtol=0)
        norm = unpack_array(entry["arrays"]["norm"], raw)
        assert not norm[..., future(cap.length)].any()
        keys = unpack_array(entry["arrays"]["keys"], raw)
        assert keys.shape == cap.keys.shape


def test_the_static_head_view_draws_only_the_causal_triangle(fam):
    _, short, _ = fam
    cap = short[1]
    for kind, want in (("attention", cap.attention), ("norm", reference_norm(cap))):
        root = ET.fromstring(to_svg(cap, "head", layer=1, kind=kind))
        lines = root.findall(f".//{SVG}line[@data-i]")
        got = {(int(e.get("data-head")), int(e.get("data-i")), int(e.get("data-j"))) for e in lines}
        h, i, j = np.nonzero(want[1] > 0)
        assert got == set(zip(h.tolist(), i.tolist(), j.tolist(), strict=True))
        assert all(j <= i for _, i, j in got)
        note = root.find(f".//{SVG}g[@class='causal']")
        assert note is not None and "earlier tokens" in "".join(note.itertext())


def test_the_static_model_view_masks_the_future_and_scales_over_the_past(fam):
    _, short, long = fam
    for cap, kind in ((short[0], "attention"), (short[1], "norm"), (long, "attention")):
        root = ET.fromstring(to_svg(cap, "model", kind=kind))
        w = cap.attention if kind == "attention" else reference_norm(cap)
        past = w[..., ~future(cap.length)]
        bar = root.find(f".//{SVG}g[@class='colorbar']")
        assert float(bar.get("data-max")) == pytest.approx(past.max(), rel=1e-5)
        images = root.findall(f".//{SVG}image")
        assert len(images) == len(cap.layers) * len(cap.heads)
        for img in images:
            px = decode_png(img.get("href"))
            res = int(img.get("data-res"))
            assert px.shape == (res, res, 4) and (res == cap.length) == (res >= cap.length)
            # transparent exactly where no cell j <= i falls in the pixel's block (c > r)
            np.testing.assert_array_equal(px[..., 3] == 0, future(res))
        assert root.findall(f".//{SVG}rect[@class='masked']")


def test_the_neuron_view_reads_each_heads_key_value_head(fam):
    name, short, _ = fam
    cap = short[0]
    t = cap.length
    for h, g in enumerate(KV_HEADS[name]):
        for i in (0, t // 2, t - 1):
            v = neuron_values(cap, 2, h, i)
            np.testing.assert_array_equal(v["key"], cap.keys[2, g])
            np.testing.assert_allclose(v["softmax"], cap.attention[2, h, i], atol=2e-5)
            assert not v["softmax"][i + 1 :].any()
    root = ET.fromstring(to_svg(cap, "neuron", layer=2, head=3 if name == "llama" else 2, token=4))
    title = "".join(root.find(f".//{SVG}g[@class='title']").itertext())
    assert ("key/value head 1 of 2" in title) == (name == "llama")
    lines = root.findall(f".//{SVG}line[@class='nv-line']")
    assert sorted(int(e.get("data-j")) for e in lines) == list(range(5))
    masked = root.findall(f".//{SVG}g[@class='nv-masked']")
    assert sorted(int(e.get("data-j")) for e in masked) == list(range(5, t))


def test_the_neuron_view_of_a_head_selection_reads_the_selected_heads_group(fam):
    """`view --views neuron --heads 3` on a grouped-query model: the capture holds query
    head 3 and only the key/value head it reads (1 = 3 // 2); its neuron view equals
    head 3's in the capture of all heads (GPT-2: its last head, 2)."""
    name, short, _ = fam
    cap, last = short[0], len(KV_HEADS[name]) - 1
    picked = cap.select(heads=[last])
    assert picked.keys.shape[1] == 1
    for i in (0, cap.length - 1):
        whole, sel = neuron_values(cap, 2, last, i), neuron_values(picked, 2, 0, i)
        assert whole.keys() == sel.keys()
        for key in whole:
            np.testing.assert_array_equal(np.asarray(sel[key]), np.asarray(whole[key]))


def _parse_html(text: str) -> None:
    """Parse the page; its header JSON and sections decode."""
    html.parser.HTMLParser().feed(text)
    header = json.loads(re.search(r'id="jaxattn-data">(.*?)</script>', text, re.S)[1])
    body = re.search(r'id="jaxattn-bin">(.*?)</script>', text, re.S)[1]
    for e in header["examples"]:
        a, b, n = e["section"]
        zlib.decompress(decode_text(body[a:b], n), -15)


def test_a_long_decoder_text_gives_bounded_well_formed_outputs(fam):
    name, _, long = fam
    t = long.length
    assert t >= LONG_TOKENS
    for view, opts in (("head", {}), ("model", {}), ("neuron", {"token": t - 1, "head": 1})):
        t0 = time.perf_counter()
        svg = to_svg(long, view, **opts)
        took = time.perf_counter() - t0
        assert took < TIME_BOUND_S and len(svg) < SIZE_BOUND[view], (view, took, len(svg))
        root = ET.fromstring(svg)
        assert float(root.get("height")) < 16 * 1024 and float(root.get("width")) < 4096
        if view == "head":  # the first window of HEAD_MAX_TOKENS tokens
            plot = root.find(f"{SVG}g[@class='plot']")
            ticks = [e for e in plot.iter(f"{SVG}text") if e.get("text-anchor") == "end"]
            assert len(ticks) == HEAD_MAX_TOKENS
            i = [int(e.get("data-i")) for e in root.iter(f"{SVG}line")]
            assert max(i) < HEAD_MAX_TOKENS
        if view == "neuron":  # the keys ending at the query
            idx = {int(e.get("data-idx")) for e in root.iter(f"{SVG}text") if e.get("data-idx")}
            assert idx == set(range(t - NEURON_MAX_KEYS, t))
    svg = to_svg(long, "head", tokens=(700, 760))
    i = [int(e.get("data-i")) for e in ET.fromstring(svg).iter(f"{SVG}line")]
    assert min(i) >= 700 and max(i) < 760
    with pytest.raises(UsageError, match="window"):
        to_svg(long, "head", tokens=(10, t + 5))
    t0 = time.perf_counter()
    page = build_html([long], views=("head", "model", "neuron"))
    took = time.perf_counter() - t0
    assert took < TIME_BOUND_S and len(page) < 16 << 20, (took, len(page))
    _parse_html(page)


def test_the_global_map_gives_each_query_head_its_key_value_heads_keys(decoder_caps, tmp_path):
    """`jaxattn view --global` over saved grouped-query captures: a map per query head."""
    from jaxattn.cli import main

    short, _ = decoder_caps["llama"]
    files = []
    for k, cap in enumerate(short):
        files.append(str(tmp_path / f"c{k}.npz"))
        cap.save(files[-1])
    out = tmp_path / "g.html"
    assert main(["view", "--global", *files, "--out", str(out), "--quiet"]) == 0
    header = json.loads(re.search(r'id="qk-data">(.*?)</script>', out.read_text(), re.S)[1])
    assert header["heads"] == [0, 1, 2, 3] and header["points"] == sum(c.length for c in short)


def test_a_head_selection_reads_the_key_heads_its_query_heads_read(decoder_caps):
    # Query heads [0, 1, 2] of a 4-head model with 2 key/value heads read kv heads
    # [0, 0, 1]: the G axis holds [0, 1] (Capture.kv_heads), not len(heads) // G.
    from jaxattn.views.payload import kv_heads, query_head_keys

    cap = decoder_caps["llama"][0][0].select(heads=[0, 1, 2])
    assert cap.kv_heads == (0, 0, 1) and kv_heads(cap) == [0, 0, 1]
    keys = cap.array("keys")
    np.testing.assert_array_equal(query_head_keys(cap), keys[:, [0, 0, 1]])
    one = cap.select(heads=[2])  # one query head reading kv head 1: G axis [1]
    assert kv_heads(one) == [0]
    np.testing.assert_array_equal(query_head_keys(one), keys[:, [1]])


def _start(page_html: str) -> dict:
    header = re.search(r'id="jaxattn-data">(.*?)</script>', page_html, re.S).group(1)
    return json.loads(header)["start"]


def test_the_neuron_view_opens_at_a_decoders_last_token(fam):
    """A decoder's token 0 sees only itself (one line, softmax 1): the neuron view opens
    at its last token instead, the page (its start) and the static export alike, which
    sees every key; a --token named wins; an encoder's (the same capture, provenance not
    causal) opens at token 0."""
    _, short, _ = fam
    cap = short[1]
    t = cap.length
    html_ = build_html(short, views=("neuron",), example=1)
    assert _start(html_) == {"example": 1, "token": t - 1}
    assert _start(build_html(short, views=("neuron",), example=1, token=0))["token"] == 0
    root = ET.fromstring(to_svg(cap, "neuron", layer=2, head=0))
    lines = root.findall(f".//{SVG}line[@class='nv-line']")
    assert sorted(int(e.get("data-j")) for e in lines) == list(range(t))
    assert {e.get("data-i") for e in lines} == {str(t - 1)}
    assert not root.findall(f".//{SVG}g[@class='nv-masked']")
    root = ET.fromstring(to_svg(cap, "neuron", layer=2, head=0, token=0))
    assert len(root.findall(f".//{SVG}line[@class='nv-line']")) == 1
    provenance = frozen({**cap.provenance, "causal": False})
    encoder = [dataclasses.replace(c, provenance=provenance) for c in short]
    assert _start(build_html(encoder, views=("neuron",), example=1))["token"] == 0
    root = ET.fromstring(to_svg(encoder[1], "neuron", layer=2, head=0))
    assert {e.get("data-i") for e in root.findall(f".//{SVG}line[@class='nv-line']")} == {"0"}
