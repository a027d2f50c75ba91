"""`jaxattn view --global`: the page's data against numpy written here, the sample, bad input.

The command runs end to end on the tiny random BERT; the coordinates in the page
must be the PCA of each head's joint normalised query/key cloud that this file
computes itself (numpy SVD) from a fresh capture, up to sign and quantisation.
"""

from __future__ import annotations

import dataclasses
import json
import re
import zlib

import numpy as np
import pytest

from jaxattn.cli import main
from jaxattn.views.page import decode_text
from jaxattn.views.qk_payload import AttentionBudget, SentenceSample, pack_global, sampled_sentence

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


def test_the_page_holds_the_pca_of_each_heads_joint_normalised_cloud(page_of, engines, corpus):
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
        c = (np.var(kh, 0).sum() / np.var(qh, 0).sum()) ** 0.25
        cloud = np.concatenate([c * qh, (kh - kh.mean(0)) / c + c * qh.mean(0)])
        centred = cloud - cloud.mean(0)
        _, _, vt = np.linalg.svd(centred, full_matrices=False)
        ref = centred @ vt[:2].T
        got = coords(header, sections, "pca", g)
        step = np.ptp(ref, 0).max() / 65535  # one scale for both axes
        for d in range(2):
            sign = np.sign(ref[:, d] @ got[:, d])
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
    start, t, index, sec, inp, record = header["sentences"][1]
    att = np.frombuffer(sections[sec], np.uint8).reshape(L, H, t, t)
    np.testing.assert_array_equal(att, np.rint(caps[1].attention * 255))
    assert (start, index, inp, record) == (len(caps[0].tokens), 1, 0, 1)
    assert header["inputs"] == [str(corpus)]


def test_sampling_keeps_the_smallest_keyed_whole_sentences_within_the_budget(
    bert_checkpoint, engines, tmp_path
):
    # record 2 is over the tiny model's 67 tokens and skipped: the others keep their
    # records (the page's "example i" on hover) and their sampling keys
    texts = [*TEXTS[:2], " ".join(["cat"] * 80), *TEXTS[2:]]
    corpus = tmp_path / "long.txt"
    corpus.write_text("\n".join(texts) + "\n", encoding="utf-8")
    out = tmp_path / "s.html"
    argv = [
        "view",
        "--global",
        str(corpus),
        "--model",
        str(bert_checkpoint),
        "--out",
        str(out),
        "--global-max-tokens",
        "20",
        "--seed",
        "2",
        "--too-long",
        "skip",
    ]
    assert main(argv) == 0
    header, _ = read_page(out)
    lengths = [len(c.tokens) for c in engines["bert"].capture(TEXTS, what=("attention",))]
    lengths.insert(2, None)
    keys = np.random.default_rng(2).random(len(texts))  # the documented draw
    want, used = [], 0
    for i in np.argsort(keys):
        if lengths[i] is None:
            continue
        if used + lengths[i] > 20:
            break
        want.append(int(i))
        used += lengths[i]
    assert [s[2] for s in header["sentences"]] == sorted(want)
    assert [s[4:] for s in header["sentences"]] == [[0, i] for i in sorted(want)]
    assert header["sampled"] == dict(
        sentences=len(want), of_sentences=5, tokens=used, of_tokens=sum(lengths[:2] + lengths[3:])
    )
    assert min(want) < 2 < max(want)  # records before and after the skipped one
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


def test_a_sentence_that_evicts_another_gets_the_attention_budget_it_frees():
    rng = np.random.default_rng(3)
    keys = np.random.default_rng(2).random(2)
    first, second = np.argsort(keys)[::-1]  # the larger key is offered first, then evicted
    atts = rng.random((2, 1, 1, 6, 6))
    budget = AttentionBudget(60)  # one sentence's deflated attention (~40 bytes), not two
    sample = SentenceSample(2, 6, seed=2, on_evict=budget.release)
    for i in (first, second):
        q = k = rng.normal(size=(1, 1, 6, 3))
        made = lambda i=i, q=q, k=k: sampled_sentence(i, ["w"] * 6, q, k, atts[i], budget)  # noqa: E731
        assert sample.offer(int(i), 6, made)
    (kept,) = sample.records()
    assert kept.index == second and kept.attention is not None
    assert budget.used == len(kept.attention)


def test_one_scale_for_both_axes_and_attention_held_within_its_budget():
    rng = np.random.default_rng(5)
    budget = AttentionBudget(800)
    sample = SentenceSample(40, 120, seed=1, on_evict=budget.release)
    made, atts = [], {}
    for i in range(40):
        t = int(rng.integers(2, 9))
        atts[i], (q, k) = rng.random((1, 2, t, t)), rng.normal(size=(2, 1, 2, t, 3))

        def make(i=i, t=t, q=q, k=k):  # made only when the sample takes the sentence
            made.append(sampled_sentence(i, ["[CLS]", *"ab" * t][:t], q, k, atts[i], budget))
            return made[-1]

        sample.offer(i, t, make)
    kept = sample.records()
    held = [r for r in kept if r.attention is not None]
    assert 0 < len(held) < len(kept) and budget.used == sum(len(r.attention) for r in held)
    assert budget.used <= 800  # evicted sentences gave their share back
    assert all(r.attention is None for r in made if r not in kept)
    for r in held:
        raw = np.frombuffer(zlib.decompress(r.attention, -15), np.uint8)
        np.testing.assert_array_equal(raw, np.rint(atts[r.index] * 255).ravel())
    # head 1's points span 2:1 (x: -2..2, y: -1..1): the same scale on both axes
    n = sum(len(r.tokens) for r in kept)
    xy = rng.uniform(-1, 1, size=(2, 1, 2, n, 2))
    xy[0, 0, 1, :2] = [[-1, -1], [1, 1]]  # the extremes
    xy[..., 0] *= [[[[1], [2]]]]
    header, sections = pack_global(
        kept,
        {"pca": (xy[0], xy[1])},
        layers=[0],
        heads=[0, 1],
        explained=np.zeros((2, 2)),
        sampled=sample.summary(),
    )
    sections = [zlib.decompress(x, -15) for x in sections]  # as the page inflates them
    x0, x1, y0, y1 = header["layouts"]["pca"]["ranges"][1]
    assert (x1 - x0, y1 - y0, x0 + x1, y0 + y1) == pytest.approx((4, 4, 0, 0))
    got = coords(header, sections, "pca", 1)
    np.testing.assert_allclose(got, np.concatenate([xy[0, 0, 1], xy[1, 0, 1]]), atol=4 / 65535)
    thumbs = np.frombuffer(sections[header["thumbs"]["section"]], np.uint8).reshape(2, -1, 2)
    span = np.ptp(thumbs[1].astype(int), 0)  # 2:1 in the thumbnail too (uint8 steps)
    assert span[0] == 255 and abs(span[1] - 255 / 2) <= 1
    assert header["with_attention"] == len(held)


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_bad_inputs_are_one_line_errors(
    corpus, bert_checkpoint, engines, tmp_path, capsys, monkeypatch
):
    saved = ["view", "--global", "--out", str(tmp_path / "x.html")]
    base = [*saved, "--model", str(bert_checkpoint)]
    assert main([*base, str(corpus), "--heads", "99"]) == 2
    assert "heads" in _err(capsys)
    bare = tmp_path / "bare.npz"
    engines["bert"].capture([TEXTS[0]], what=("attention",))[0].save(bare)
    assert main([*saved, str(bare)]) == 2
    assert "needs queries, keys: capture it again with --what attention,queries,keys" in _err(
        capsys
    )
    part = tmp_path / "part.npz"
    cap = engines["bert"].capture([TEXTS[0]], what=("queries", "keys"), heads=(0, 1))[0]
    cap.save(part)
    assert main([*saved, str(part), "--heads", "2"]) == 2
    assert "--heads 2 was not captured" in _err(capsys)
    assert main([*base, str(part)]) == 2  # saved captures are shown as stored
    assert _err(capsys).endswith(f"INPUT {part} holds captures, shown as stored: drop --model")
    assert main([*saved, str(part), "--precision", "bf16"]) == 2  # was drawn, flag unused
    assert _err(capsys).endswith(f"INPUT {part} holds captures, shown as stored: drop --precision")
    for flag, value in (("--attention", "dense"), ("--attention-block", "64")):  # as unused
        assert main([*saved, str(part), flag, value]) == 2
        assert _err(capsys).endswith(f"INPUT {part} holds captures, shown as stored: drop {flag}")
    other = tmp_path / "other.npz"  # the same sizes, other weights
    dataclasses.replace(
        cap, provenance={**cap.provenance, "model": "other-bert", "weights": "blake2b:0123"}
    ).save(other)
    assert main([*saved, str(part), str(other)]) == 2
    err = _err(capsys)
    assert f"INPUT {other} comes from other-bert, weights blake2b:0123, INPUT {part} from " in err
    assert err.endswith("map the captures of one model together")
    assert main([*base, str(corpus), str(other)]) == 2  # texts: the engine's weights
    assert f"INPUT {other} comes from other-bert, weights blake2b:0123, INPUT {corpus}" in _err(
        capsys
    )
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
    assert "--global writes one HTML page: drop --format svg" in _err(capsys)
    assert main([*base, str(corpus), "--out", str(tmp_path / "x.png")]) == 2
    assert _err(capsys).endswith("give --out a .html name, not " + str(tmp_path / "x.png"))
    assert main([*base, str(corpus), "--views", "head"]) == 2
    assert _err(capsys).endswith("drop --views head")
    assert main(["view", "--global", "--out", str(tmp_path / "y.html")]) == 2
    assert "needs a CORPUS" in _err(capsys)


def test_tsne_layout_of_the_layout_extra(corpus, bert_checkpoint, tmp_path):
    # openTSNE is a dev dependency: the extra's path runs in every test run
    out = tmp_path / "t.html"
    argv = [
        "view",
        "--global",
        str(corpus),
        "--model",
        str(bert_checkpoint),
        "--out",
        str(out),
        "--layers",
        "0",
        "--heads",
        "1",
        "--global-reducer",
        "tsne",
    ]
    assert main(argv) == 0
    header, sections = read_page(out)
    assert list(header["layouts"]) == ["pca", "tsne"]
    xy = coords(header, sections, "tsne", 0)
    assert xy.shape == (2 * header["points"], 2) and np.isfinite(xy).all()
    assert not np.allclose(xy, coords(header, sections, "pca", 0), atol=1e-3)


def test_the_summary_and_the_caption_count_layers_and_heads_in_words(
    corpus, bert_checkpoint, tmp_path, capsys
):
    from jaxattn.views.qk_page import caption

    out = tmp_path / "one.html"
    argv = ["view", "--global", str(corpus), "--model", str(bert_checkpoint), "--out", str(out)]
    assert main([*argv, "--layers", "0", "--heads", "1,2", "--quiet"]) == 0
    assert f"wrote {out} (global map: 1 layer x 2 heads, " in capsys.readouterr().out
    header, _ = read_page(out)
    assert "(1 layer x 2 heads) over 5 sentences" in caption(header)
    assert main([*argv, "--layers", "0,1", "--heads", "0", "--quiet", "--overwrite"]) == 0
    assert "(global map: 2 layers x 1 head, " in capsys.readouterr().out


def test_a_store_gives_the_page_its_texts_give_reading_only_what_the_map_needs(
    corpus, page_of, bert_checkpoint, tmp_path, monkeypatch
):
    from jaxattn.store import Store

    store, out = tmp_path / "c.zarr", tmp_path / "s.html"
    assert (
        main(
            [
                "dump",
                str(corpus),
                "--model",
                str(bert_checkpoint),
                "--out",
                str(store),
                "--what",
                "attention,queries,keys,scores",
                "--quiet",
            ]
        )
        == 0
    )
    asked, read = [], Store.read
    monkeypatch.setattr(
        Store, "read", lambda self, i, what=None: asked.append(what) or read(self, i, what)
    )
    assert main(["view", "--global", str(store), "--out", str(out), "--limit", "5"]) == 0
    assert len(asked) == 5 and set(map(tuple, asked)) == {("attention", "queries", "keys")}
    (want, want_s), (got, got_s) = read_page(page_of), read_page(out)
    assert got["sentences"] == want["sentences"] and got["tokens"] == want["tokens"]
    assert got["inputs"] == [str(store)]  # the records of the store's entries: 0..4
    for g in (0, len(got["heads"]) * len(got["layers"]) - 1):
        a, b = coords(got, got_s, "pca", g), coords(want, want_s, "pca", g)
        np.testing.assert_allclose(a, b, atol=2e-4 * np.ptp(b))
