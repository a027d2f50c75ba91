"""The HTML page's compact data (issue 15): packing, its precision, the example cap.

The page's decoder (core.js) runs in headless Chromium on the tiny captures and
must give the capture's values within the bounds stated in `jaxattn.views.payload`.
"""

from __future__ import annotations

import json
import re
import zlib

import numpy as np
import pytest
from views_helpers import norm_weights, wait_ready

from jaxattn.views import build_html, build_payload
from jaxattn.views.page import ALPHABET, decode_text, encode_text
from jaxattn.views.payload import QK_LEVELS, head_steps, pack_array, pack_page, unpack_array
from jaxattn.views.stats import stats_document

# Every decoded array of one example of a (header, text) pair, as nested lists.
DECODE = """async ([header, text, i]) => {
  const JX = window.JaxattnViews, doc = JX.unpack(header, text);
  const ex = await JX.loadExample(doc.examples[i]), t = ex._t;
  const all = (x) => Array.from({length: x.shape.reduce((a, b) => a * b, 1)}, (_, o) => x.at(o));
  return {tokens: ex.tokens, stats: ex.stats, attention: all(t.weights.attention),
          norm: all(t.weights.norm), queries: all(t.queries), keys: all(t.keys),
          u1: t.weights.attention.data instanceof Uint8Array};
}"""


def page_data(html: str) -> tuple[dict, str]:
    """The (JSON header, binary text) a page embeds."""
    header = re.search(r'id="jaxattn-data">(.*?)</script>', html, re.S).group(1)
    text = re.search(r'id="jaxattn-bin">(.*?)</script>', html, re.S).group(1)
    return json.loads(header), text


def section(header: dict, text: str, i: int) -> bytes:
    """Example `i`'s raw section, decoded on the Python side."""
    a, b, n = header["examples"][i]["section"]
    return zlib.decompress(decode_text(text[a:b], n), -15)


def qk_bound(x: np.ndarray) -> np.ndarray:
    """The stated bound: half the head's step, broadcast over its values."""
    return (head_steps(x).astype(np.float64) / 2)[..., None, None] + 1e-6


def test_page_decoder_matches_the_stated_precision(page, tmp_path, tiny_caps):
    """One page load: the uint8 page's example 1 and a float32 page's example 0, decoded by
    core.js, against the capture (within the stated bounds) and Python's decoder."""
    path = tmp_path / "small.html"
    html = build_html(tiny_caps, embed="uint8")
    path.write_text(html, encoding="utf-8")
    page.goto(path.as_uri())
    wait_ready(page)
    header, text = page_data(html)
    assert not set(text) - set(ALPHABET) and "<" not in text
    cap = tiny_caps[1]
    got = page.evaluate(DECODE, [header, text, 1])
    assert got["u1"] and got["tokens"] == list(cap.tokens)
    assert got["stats"] == json.loads(json.dumps(stats_document(cap)))
    att, norm = cap.attention, norm_weights(cap)
    np.testing.assert_allclose(np.reshape(got["attention"], att.shape), att, atol=1 / 510 + 1e-6)
    np.testing.assert_allclose(np.reshape(got["norm"], att.shape), norm, atol=1 / 510 + 1e-6)
    for name in ("queries", "keys"):
        want = cap.array(name)
        err = np.abs(np.reshape(got[name], want.shape) - want)
        assert (err <= qk_bound(want)).all(), name
    # the page's decoder and Python's agree (the format is the same on both sides)
    raw = section(header, text, 1)
    for name, desc in header["examples"][1]["arrays"].items():
        if name != "stats":
            want = unpack_array(desc, raw)
            np.testing.assert_allclose(np.reshape(got[name], want.shape), want, atol=1e-6)
    exact = page_data(build_html(tiny_caps[0], embed="float32"))
    got = page.evaluate(DECODE, [*exact, 0])
    assert not got["u1"]
    for name in ("attention", "queries", "keys"):
        want = tiny_caps[0].array(name)
        np.testing.assert_array_equal(np.reshape(got[name], want.shape), want)


def test_pack_array_bounds_and_fallback():
    rng = np.random.default_rng(0)
    w = rng.dirichlet(np.ones(7), size=(2, 3, 7)).astype(np.float32)  # [L, H, T, T] rows sum to 1
    desc, raw = pack_array(w, "u1", keymajor=True)
    assert len(raw) == w.size
    back = unpack_array(dict(desc, at=0), raw)
    assert np.abs(back - w).max() <= 1 / 510 + 1e-7
    q = rng.normal(size=(2, 3, 7, 4)).astype(np.float32) * np.float32([[[[1e-3]]], [[[40.0]]]])
    q[0, 1] = 0.0  # an all-zero head
    desc, raw = pack_array(q, "i1")
    assert desc["dtype"] == "i1" and len(raw) == 2 * 6 + q.size
    back = unpack_array(dict(desc, at=0), raw)
    assert (np.abs(back - q) <= qk_bound(q)).all() and (back[0, 1] == 0).all()
    assert (head_steps(q).astype(np.float64) * QK_LEVELS >= np.abs(q).max((-2, -1))).all()
    big = np.full((1, 1, 2, 2), 1e7, np.float32)  # a step over float16's range stays exact
    desc, raw = pack_array(big, "i1")
    assert desc["dtype"] == "f4"
    np.testing.assert_array_equal(unpack_array(dict(desc, at=0), raw), big)


def test_binary_text_round_trip():
    rng = np.random.default_rng(1)
    for n in (0, 1, 12, 13, 14, 27, 1001):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        text = encode_text(data)
        assert len(text) == 2 * -(-8 * n // 13) and decode_text(text, n) == data
    assert len(ALPHABET) == 91 and not set("<>&") & set(ALPHABET)


def test_tokens_deduplicated_across_examples(tiny_caps):
    header, _ = pack_page(tiny_caps, views=("head",))
    table = header["tokens"]
    assert len(table) == len(set(table))
    assert len(table) < sum(len(c.tokens) for c in tiny_caps)  # sentence A is in both
    for cap, ex in zip(tiny_caps, header["examples"], strict=True):
        assert [table[i] for i in ex["tokens"]] == list(cap.tokens)
        assert set(ex["arrays"]) == {"attention", "norm"}  # the head view needs no q, k, stats


def test_auto_is_exact_for_small_pages_only(tiny_caps):
    header, _ = pack_page(tiny_caps)
    assert {d.get("dtype") for e in header["examples"] for d in e["arrays"].values()} == {
        "f4",
        None,  # stats
    }
    header, _ = pack_page(tiny_caps, embed="uint8")
    codes = {k: d.get("dtype") for k, d in header["examples"][0]["arrays"].items()}
    assert codes == dict(attention="u1", norm="u1", queries="i1", keys="i1", stats=None)


@pytest.mark.parametrize("build", [build_html, build_payload])
def test_more_examples_than_the_cap(build, tiny_caps):
    caps = [*tiny_caps, tiny_caps[0]]
    with pytest.raises(
        ValueError,
        match=r"^3 examples are over the page's cap of 2: .*"
        r"max_examples=3 \(jaxattn view --max-examples\)$",
    ):
        build(caps, max_examples=2)
    assert build(caps, max_examples=3)
