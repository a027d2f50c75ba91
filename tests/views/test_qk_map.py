"""`jaxattn view --global`: the page's data against numpy written here, the sample, bad input.

The command runs end to end on the tiny random BERT; the coordinates in the page
must be the PCA of each head's joint normalised query/key cloud that this file
computes itself (numpy SVD) from a fresh capture, up to sign and quantisation.
"""

from __future__ import annotations

import json
import re
import zlib

import numpy as np
import pytest

from jaxattn.cli import main
from jaxattn.views.page import decode_text
from jaxattn.views.qk_map import SentenceSample

TEXTS = [
    "The cat sat on the mat.",
    "I bought fresh strawberries, and cream!",
    "He ran home.",
    "A dog barked at the moon tonight.",
    "Quiet.",
]


def read_page(path):
    """(header, [raw section bytes]) of a global map page."""
    text = path.read_text(encoding="utf-8")
    header = json.loads(re.search(r'id="qk-data">(.*?)</script>', text, re.S).group(1))
    blob = re.search(r'id="qk-bin">(.*?)</script>', text, re.S).group(1)
    raws = [decode_text(blob[a:b], n) for a, b, n in header["sections"]]
    return header, [zlib.decompress(r, -15) for r in raws]


def coords(header, sections, layout: str, g: int) -> np.ndarray:
    """Head g's [2n, 2] points of `layout`, dequantised."""
    lay = header["layouts"][layout]
    x0, x1, y0, y1 = lay["ranges"][g]
    ints = np.frombuffer(sections[lay["sections"][g]], "<u2").reshape(-1, 2).astype(np.float64)
    return np.stack([x0 + ints[:, 0] / 65535 * (x1 - x0), y0 + ints[:, 1] / 65535 * (y1 - y0)], 1)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("qk") / "corpus.txt"
    path.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def page_of(corpus, bert_checkpoint, tmp_path_factory):
    """The global map of the corpus with the tiny BERT (all layers and heads)."""
    out = tmp_path_factory.mktemp("qk_page") / "qk.html"
    argv = ["view", "--global", str(corpus), "--model", str(bert_checkpoint), "--out", str(out)]
    assert main(argv) == 0
    return out


def test_the_page_holds_the_pca_of_each_heads_joint_normalised_cloud(page_of, engines):
    header, sections = read_page(page_of)
    caps = engines["bert"].capture(TEXTS, what=("queries", "keys", "attention"))
    q = np.concatenate([c.queries for c in caps], 2).astype(np.float64)
    k = np.concatenate([c.keys for c in caps], 2).astype(np.float64)
    L, H, n, _ = q.shape
    assert header["points"] == n and len(header["sentences"]) == len(TEXTS)
    assert header["sampled"] == dict(sentences=5, of_sentences=5, tokens=n, of_tokens=n)
    assert (header["layers"], header["heads"]) == (list(range(L)), list(range(H)))
    for g in range(L * H):
        qh, kh = q[g // H, g % H], k[g // H, g % H]
        kt = kh - kh.mean(0) + qh.mean(0)
        c = np.sqrt(np.sqrt((kt**2).sum(1).mean() / (qh**2).sum(1).mean()))
        cloud = np.concatenate([c * qh, kt / c])
        centred = cloud - cloud.mean(0)
        _, _, vt = np.linalg.svd(centred, full_matrices=False)
        ref = centred @ vt[:2].T
        got = coords(header, sections, "pca", g)
        for d in range(2):
            sign = np.sign(ref[:, d] @ got[:, d])
            step = np.ptp(ref[:, d]) / 65535
            np.testing.assert_allclose(got[:, d], sign * ref[:, d], atol=step + 1e-4)
    # tokens and classes, and the click-through attention as uint8 steps of 1/255
    ids = np.frombuffer(sections[header["points_section"]][: 4 * n], "<u4")
    classes = np.frombuffer(sections[header["points_section"]][4 * n :], np.uint8)
    assert [header["tokens"][i] for i in ids[: len(caps[0].tokens)]] == list(caps[0].tokens)
    specials = [t in ("[CLS]", "[SEP]") for c in caps for t in c.tokens]
    assert (classes == 2).tolist() == specials
    assert classes[ids == header["tokens"].index(".")].tolist() == [1] * int(
        (ids == header["tokens"].index(".")).sum()
    )
    start, t, index, sec = header["sentences"][1]
    att = np.frombuffer(sections[sec], np.uint8).reshape(L, H, t, t)
    np.testing.assert_array_equal(att, np.rint(caps[1].attention * 255))
    assert (start, index) == (len(caps[0].tokens), 1)


def test_sampling_keeps_the_smallest_keyed_whole_sentences_within_the_budget(
    corpus, bert_checkpoint, engines, tmp_path
):
    out = tmp_path / "s.html"
    argv = ["view", "--global", str(corpus), "--model", str(bert_checkpoint), "--out", str(out),
            "--global-max-tokens", "20", "--global-seed", "3", "--heads", "0"]  # fmt: skip
    assert main(argv) == 0
    header, _ = read_page(out)
    lengths = [len(c.tokens) for c in engines["bert"].capture(TEXTS, what=("attention",))]
    keys = np.random.default_rng(3).random(len(TEXTS))  # the documented draw
    want, used = [], 0
    for i in np.argsort(keys):
        if used + lengths[i] > 20:
            break
        want.append(int(i))
        used += lengths[i]
    assert [s[2] for s in header["sentences"]] == sorted(want)
    assert header["sampled"] == dict(sentences=len(want), of_sentences=5, tokens=used,
                                     of_tokens=sum(lengths))  # fmt: skip
    assert header["heads"] == [0]
    page = out.read_text(encoding="utf-8")
    assert "qk-sampled" in page and "'none'" in page  # said on the page; CSP default-src 'none'


def test_the_streamed_sample_equals_its_definition_on_random_lengths():
    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 40, 300)
    lengths[5] = 500  # alone over the budget: never kept, and it stops nothing
    s = SentenceSample(len(lengths), 400, seed=11)
    for i, t in enumerate(lengths):
        s.offer(i, int(t), lambda i=i: i)
    keys = np.random.default_rng(11).random(len(lengths))
    want, used = [], 0
    for i in np.argsort(keys):
        if lengths[i] > 400:
            continue
        if used + lengths[i] > 400:
            break
        want.append(int(i))
        used += lengths[i]
    assert s.records() == sorted(want) and s.tokens == used <= 400


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_bad_inputs_are_one_line_errors(corpus, bert_checkpoint, engines, tmp_path, capsys,
                                        monkeypatch):  # fmt: skip
    base = ["view", "--global", "--model", str(bert_checkpoint), "--out", str(tmp_path / "x.html")]
    assert main([*base, str(corpus), "--heads", "99"]) == 2
    assert "heads" in _err(capsys)
    bare = tmp_path / "bare.npz"
    engines["bert"].capture([TEXTS[0]], what=("attention",))[0].save(bare)
    assert main([*base, str(bare)]) == 2
    assert "needs queries, keys" in _err(capsys)
    part = tmp_path / "part.npz"
    engines["bert"].capture([TEXTS[0]], what=("queries", "keys"), heads=(0, 1))[0].save(part)
    assert main([*base, str(part), "--heads", "2"]) == 2
    assert "--heads 2 was not captured" in _err(capsys)
    import importlib

    real = importlib.import_module

    def no_opentsne(name, *a):
        if name == "openTSNE":
            raise ImportError(name)
        return real(name, *a)

    monkeypatch.setattr(importlib, "import_module", no_opentsne)
    assert main([*base, str(corpus), "--global-reducer", "tsne"]) == 2
    assert _err(capsys).endswith(
        "--global-reducer tsne needs openTSNE: pip install 'jaxattn[layout]' "
        "(or use --global-reducer pca)"
    )
    assert main([*base, str(corpus), "--format", "svg"]) == 2
    assert "--global writes one HTML page" in _err(capsys)
    assert main(["view", "--global", "--out", str(tmp_path / "y.html")]) == 2
    assert "needs a CORPUS" in _err(capsys)


def test_tsne_layout_of_the_layout_extra(corpus, bert_checkpoint, tmp_path):
    # openTSNE is a dev dependency: the extra's path runs in every test run
    out = tmp_path / "t.html"
    argv = ["view", "--global", str(corpus), "--model", str(bert_checkpoint), "--out", str(out),
            "--layers", "0", "--heads", "1", "--global-reducer", "tsne"]  # fmt: skip
    assert main(argv) == 0
    header, sections = read_page(out)
    assert list(header["layouts"]) == ["pca", "tsne"]
    xy = coords(header, sections, "tsne", 0)
    assert xy.shape == (2 * header["points"], 2) and np.isfinite(xy).all()
    assert not np.allclose(xy, coords(header, sections, "pca", 0), atol=1e-3)


def test_a_store_gives_the_page_its_texts_give(corpus, page_of, bert_checkpoint, tmp_path):
    store, out = tmp_path / "c.zarr", tmp_path / "s.html"
    assert main(["dump", str(corpus), "--model", str(bert_checkpoint), "--out", str(store),
                 "--what", "attention,queries,keys", "--quiet"]) == 0  # fmt: skip
    assert main(["view", "--global", str(store), "--out", str(out), "--limit", "5"]) == 0
    (want, want_s), (got, got_s) = read_page(page_of), read_page(out)
    assert got["sentences"] == want["sentences"] and got["tokens"] == want["tokens"]
    for g in (0, len(got["heads"]) * len(got["layers"]) - 1):
        a, b = coords(got, got_s, "pca", g), coords(want, want_s, "pca", g)
        np.testing.assert_allclose(a, b, atol=2e-4 * np.ptp(b))
