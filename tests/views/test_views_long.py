"""Long inputs (issue 31): pages of bounded size at 8,192 tokens, the head view's
window and bands, the stats-first page's numbers (against a numpy re-computation
written here), and `jaxattn view --stats-first`.

The captures are synthetic (numpy, `views_helpers.long_capture`; no model) but for
the CLI's, which uses the tiny BERT.
"""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
from hf_fixtures import EXAMPLE_A
from views_helpers import long_capture

from jaxattn.capture import Capture
from jaxattn.cli import main
from jaxattn.errors import UsageError
from jaxattn.quantities import DECODER_HEAD_STATS, ENTROPY_SMOOTHING, HEAD_STATS
from jaxattn.views import build_html, to_svg
from jaxattn.views.drawing import max_pool
from jaxattn.views.long_maps import (
    BAND,
    LONG_TOKENS,
    POOL,
    RADIUS,
    band,
    is_long,
    long_arrays,
    token_window,
)
from jaxattn.views.page import document, long_page_bound
from jaxattn.views.payload import pack_page, unpack_array, view_weights
from jaxattn.views.segments import segments_document
from jaxattn.views.segments_page import SCRIPTS, build_segments_html, page_bytes_bound

T8K = 8192


@pytest.fixture(scope="module")
def capture_8k() -> Capture:
    """8,192 tokens, 1 layer x 1 head of uint8 weights drawn uniformly (deflate cannot
    shrink them: the page's worst case), 67 MB of map."""
    rng = np.random.default_rng(0)
    return Capture(
        tokens=("[CLS]", *(f"w{i}" for i in range(T8K - 2)), "[SEP]"),
        sentence_b_start=None,
        layers=(0,),
        heads=(3,),
        dtype="uint8",
        tensors=dict(attention=rng.integers(0, 256, (1, 1, T8K, T8K), np.uint8)),
        quantization=dict(attention=(1 / 255, 0.0)),
        provenance={"causal": False},
    )


def test_an_8k_token_page_is_bounded_by_t_not_t_squared(capture_8k):
    cap = capture_8k
    html = build_html(cap, views=("head", "model", "stats"))
    frame = len(document("", title="jaxattn views").encode())
    segments = -(-T8K // 64)
    bound = long_page_bound(cap.tokens, maps=1, stats_values=4 * (segments + 1))
    size = len(html.encode())
    # 256² + 257 x 8,192 bytes deflate cannot shrink, 16/13 as text: ~2.7 MB a head, where
    # the map itself is 67 MB
    assert size - frame <= bound < 3 << 20, (size, bound)
    assert size < cap.tensors["attention"].nbytes / 20
    # the static exports: the model view pooled to its thumbnails, the head view's window
    model = to_svg(cap, "model")
    assert len(model) < 1 << 20 and "max-pooled to" in model
    head = to_svg(cap, "head", tokens=(4000, 4040))
    assert "tokens 4000–4039 of 8192" in head and len(head) < 1 << 20
    with pytest.raises(UsageError, match=r"8192-token capture .* \(jaxattn view --stats-first\)$"):
        to_svg(cap, "stats")


def test_the_stats_first_page_of_8k_tokens_is_small(capture_8k):
    html = build_segments_html(capture_8k)
    data = re.search(r'id="jaxattn-segments">(.*?)</script>', html, re.S).group(1)
    bound = page_bytes_bound(capture_8k.tokens, heads=1, segments=128)
    assert len(data.encode()) <= bound < 300_000
    frame = len(document("", title="x", scripts=SCRIPTS).encode())
    assert len(html.encode()) < frame + bound + 1000


def test_token_window_and_band():
    assert token_window(0, 8192) == (0, 2 * RADIUS + 1)
    assert token_window(1000, 8192) == (1000 - RADIUS, 1000 + RADIUS + 1)
    assert token_window(8191, 8192) == (8192 - 2 * RADIUS - 1, 8192)
    assert token_window(5, 40) == (0, 40)  # a short text: all of it
    with pytest.raises(UsageError, match="token 40 is out of range: the text has 40 tokens"):
        token_window(40, 40)
    rng = np.random.default_rng(1)
    w = rng.random((9, 9)).astype(np.float32)
    got = band(w, -3, 2)
    for i in range(9):
        for d, off in enumerate(range(-3, 3)):
            j = i + off
            assert got[i, d] == (w[i, j] if 0 <= j < 9 else 0)


@pytest.mark.parametrize("causal", [False, True])
def test_long_arrays_hold_every_window_and_the_pooled_map(causal):
    cap = long_capture(300, causal=causal, norm=True)
    for kind in ("attention", "norm"):
        full = view_weights(cap, kind)[0]  # [H, T, T]
        got = long_arrays(cap, kind, causal)
        bands, pooled = got["band"], got["pooled"]
        np.testing.assert_allclose(got["first"][0], full[:, :, 0], rtol=1e-6)
        assert pooled.shape == (1, 2, POOL, POOL)
        for h in range(2):
            np.testing.assert_allclose(pooled[0, h], max_pool(full[h], POOL), rtol=1e-6)
            lo, hi = token_window(150, 300)
            i, j = np.meshgrid(np.arange(lo, hi), np.arange(lo, hi), indexing="ij")
            assert np.abs(i - j).max() <= BAND
            seen = j <= i if causal else np.ones_like(i, bool)  # a decoder's band: j <= i
            got = bands[0, h, i[seen], (j - i)[seen] + BAND]
            np.testing.assert_allclose(got, full[h][i[seen], j[seen]], rtol=1e-6, atol=1e-12)


def test_a_long_example_is_packed_as_bands_and_pooled_maps():
    cap = long_capture(LONG_TOKENS + 1, heads=1, causal=True)
    header, sections = pack_page(cap, views=("head", "model"), embed="uint8")
    arrays = header["examples"][0]["arrays"]
    assert set(arrays) == {"attention", "pooled:attention", "first:attention"}
    assert arrays["attention"]["shape"] == [1, 1, LONG_TOKENS + 1, BAND + 1]
    assert arrays["attention"]["band"] == [-BAND, 0] and not arrays["attention"]["keymajor"]
    import zlib

    raw = zlib.decompress(sections[0], -15)
    pooled = unpack_array(arrays["pooled:attention"], raw)
    np.testing.assert_allclose(
        pooled[0, 0], max_pool(view_weights(cap, "attention")[0, 0], POOL), atol=1 / 510 + 1e-6
    )
    assert is_long(cap) and not is_long(long_capture(LONG_TOKENS, heads=1))
    # shorter, but with maps of over 64 MiB: a 12 x 12-head model from ~700 tokens
    base = dict(sentence_b_start=None, layers=tuple(range(12)), dtype="uint8", tensors={})
    heads = tuple(range(12))
    assert is_long(Capture(tokens=("a",) * 700, heads=heads, **base))
    assert not is_long(Capture(tokens=("a",) * 600, heads=heads, **base))
    assert not is_long(Capture(tokens=("a",) * 512, heads=heads * 40, **base))


def reference(w: np.ndarray, causal: bool, segment: int, local: int) -> dict:
    """The per-segment statistics of one [T, T] map, row by row (the definitions of
    jaxattn.views.segments, written out)."""
    t = len(w)
    s = ENTROPY_SMOOTHING
    rows = {k: [] for k in ("sink", "prev", "local", "entropy")}
    for i in range(1, t):
        seen = np.arange(i + 1) if causal else np.arange(t)
        rows["sink"].append(w[i, 0])
        rows["prev"].append(w[i, i - 1])
        near = [j for j in seen if abs(i - j) <= local and j >= 1]
        rows["local"].append(sum(w[i, j] for j in near))
        p = (1 - s) * w[i, seen].astype(np.float64) + s / len(seen)
        rows["entropy"].append(-(p * np.log(p)).sum())
    out = {}
    for k, v in rows.items():
        v = np.array([np.nan, *v])
        segs = [np.nanmean(v[a : a + segment]) for a in range(0, t, segment)]
        out[k] = (np.array(segs), np.nanmean(v))
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_segment_statistics_match_a_numpy_recomputation(causal):
    cap = long_capture(150, heads=2, causal=causal, norm=True, seed=3)
    doc = segments_document(cap, segment=32, local=5)
    assert doc["bounds"][-1] == [128, 150] and doc["causal"] is causal
    for kind in ("attention", "norm"):
        k = doc["kinds"][kind]
        assert k["source"] == [["maps", "maps"]]
        w = view_weights(cap, kind)[0]
        for h in range(2):
            want = reference(w[h], causal, 32, 5)
            for stat, (segs, whole) in want.items():
                got = np.array(k["segments"][stat][0][h], float)
                np.testing.assert_allclose(got, segs, rtol=1e-5, atol=1e-6, err_msg=stat)
                assert k["whole"][stat][0][h] == pytest.approx(whole, rel=1e-5, abs=1e-6)
    sinks = np.array(doc["kinds"]["attention"]["segments"]["sink"][0][0])
    assert (sinks > 0.5).all()  # head 0 is the sink head, in every segment


def test_a_capture_of_statistics_only_gives_whole_text_values():
    """Statistics computed by the numpy references of the engine's quantities, from the
    maps of a decoder and of an encoder: the page's whole-text values without a map."""
    from jaxattn.analysis import head_statistics
    from jaxattn.analysis.decoder import decoder_head_statistics

    for causal in (True, False):
        cap = long_capture(100, heads=2, causal=causal, seed=5)
        w = cap.attention
        dec = decoder_head_statistics(w, cap.tokens)
        enc = head_statistics(w, cap.tokens)
        stats = dict(decoder_head_stats=np.stack([dec[n] for n in DECODER_HEAD_STATS], -1))
        if not causal:
            stats["head_stats"] = np.stack([enc[n] for n in HEAD_STATS], -1)
        only = dataclasses.replace(cap, tensors={k: v.astype(np.float32) for k, v in stats.items()})
        doc = segments_document(only, segment=16)
        k = doc["kinds"]["attention"]
        assert "norm" not in doc["kinds"] and k["segments"]["sink"] == [[None, None]]
        for h in range(2):
            want = reference(w[0, h], causal, 16, 8)
            assert k["whole"]["sink"][0][h] == pytest.approx(want["sink"][1], rel=1e-5)
            assert k["whole"]["prev"][0][h] == pytest.approx(want["prev"][1], rel=1e-5)
            assert k["whole"]["local"][0][h] is None  # no statistic gives it
            entropy = want["entropy"][1] if causal else enc["entropy"][0, h]  # all rows
            assert k["whole"]["entropy"][0][h] == pytest.approx(entropy, rel=1e-5)
        assert k["source"] == [["decoder_head_stats"] * 2]
        # with one head's map from a second capture of the text: that head's segments
        mixed = segments_document([only, cap.select(heads=[1])], segment=16)
        assert mixed["kinds"]["attention"]["source"] == [["decoder_head_stats", "maps"]]


def test_bad_segmenting_is_refused():
    cap = long_capture(40, heads=1)
    with pytest.raises(UsageError, match="segment 0: a segment holds at least 1 token"):
        segments_document(cap, segment=0)
    with pytest.raises(
        ValueError,
        match=r"^segment 1 cuts 1100 tokens into over 1024 segments: "
        r"give a segment of at least 2 tokens$",
    ):
        segments_document(long_capture(1100, heads=1), segment=1)
    with pytest.raises(UsageError, match="same text"):
        segments_document([cap, long_capture(41, heads=1)])
    stats_only = dataclasses.replace(cap, tensors={})
    with pytest.raises(UsageError, match="needs attention maps or head statistics"):
        segments_document(stats_only)


def _segments_of(path) -> dict:
    html = path.read_text(encoding="utf-8")
    return json.loads(re.search(r'id="jaxattn-segments">(.*?)</script>', html)[1])


def test_view_stats_first_from_text_and_from_a_saved_capture(
    engines, bert_checkpoint, tiny_caps, tmp_path, monkeypatch, capsys
):
    import jaxattn

    # the session's engine, not a second load of the same checkpoint
    monkeypatch.setattr(jaxattn, "load", lambda path=None: engines["bert"])
    cap = tiny_caps[0]  # EXAMPLE_A: attention of every head
    out = tmp_path / "s.html"
    argv = ["view", EXAMPLE_A, "--model", str(bert_checkpoint), "--segment", "4", "--quiet"]
    assert main([*argv, "--stats-first", "statistics", "--out", str(out)]) == 0
    doc = _segments_of(out)["examples"][0]["doc"]
    assert doc["segment"] == 4 and doc["T"] == cap.length and doc["heads"] == [0, 1, 2]
    k = doc["kinds"]["attention"]
    assert {s for row in k["source"] for s in row} == {"decoder_row_head_stats"}
    want = cap.attention[:, :, 1:, 0].mean(-1)  # every head's sink share, from its map
    np.testing.assert_allclose(np.array(k["whole"]["sink"], float), want, rtol=1e-4)
    for layer, head in ((0, 0), (2, 1)):  # every head's segments, from its per-row statistics
        ref = reference(cap.attention[layer, head], False, 4, 8)
        for stat in ("sink", "prev", "entropy"):
            got = np.array(k["segments"][stat][layer][head], float)
            np.testing.assert_allclose(got, ref[stat][0], rtol=1e-4, atol=1e-6, err_msg=stat)
        assert k["segments"]["local"][layer][head] is None  # it needs the map
    # a saved capture of one head's maps: its segments, as the numpy re-computation
    saved = tmp_path / "maps.npz"
    cap.select(layers=[2], heads=[1]).save(saved)
    assert (
        main(
            [
                "view",
                str(saved),
                "--stats-first",
                "--segment",
                "4",
                "--out",
                str(out),
                "--overwrite",
                "--quiet",
            ]
        )
        == 0
    )
    doc = _segments_of(out)["examples"][0]["doc"]
    assert doc["layers"] == [2] and doc["heads"] == [1]
    ref = reference(cap.attention[2, 1], False, 4, 8)
    got = np.array(doc["kinds"]["attention"]["segments"]["local"][0][0], float)
    np.testing.assert_allclose(got, ref["local"][0], rtol=1e-5)
    assert main([*argv, "--stats-first", "--out", str(tmp_path / "s.svg")]) == 2
    assert main(["view", str(saved), "--stats-first", "--segment", "0", "--out", str(out)]) == 2
    # one text is one example, whatever captures its page took (statistics, maps: 3 here)
    capsys.readouterr()
    assert main([*argv, "--stats-first", "--out", str(tmp_path / "m.html")]) == 0
    assert "(statistics along the text; 1 example(s))" in capsys.readouterr().out
