"""What the views say about a decoder's capture (the tiny Llama: 4 query heads reading
2 key/value heads, h // 2).

- The stats view of a decoder shows the decoder statistics of `jaxattn analyze`'s
  "Decoder heads" (sink, previous token, self, punctuation, entropy over rows
  1 .. T-1, induction, duplicate), checked against loops written here, and none of
  the encoder's Clark et al. statistics ([CLS]/[SEP] columns), Kovaleva classes or
  Vig patterns.
- A grouped-query head is labelled with the model's key/value head, also in a
  capture of some heads (`view --heads 3` of a 4-head model: key/value head 1 of 2),
  where the capture's G axis holds only the key/value heads read; `jaxattn capture`'s
  summary says which key/value heads its keys and values hold.
- A capture through a server (whose provenance has no model config) is labelled the
  same: `jaxattn view --server` of the tiny Llama names key/value head 1 of 2.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from jaxattn.capture import Capture
from jaxattn.cli import main
from jaxattn.views import build_payload, to_svg
from jaxattn.views.payload import pack_example
from jaxattn.views.stats import stats_document

SVG = "{http://www.w3.org/2000/svg}"
TEXT = "The cat sat on the mat. The cat sat"
PER = 2  # query heads per key/value head of the tiny Llama: h // 2


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> tuple[Capture, str, str]:
    """(the capture of TEXT: attention, queries, keys; it saved as .npz; the checkpoint)."""
    from llama_fixture import make_llama_checkpoint

    import jaxattn

    path = make_llama_checkpoint(tmp_path_factory.mktemp("llama"))
    engine = jaxattn.load(path, buckets=(32,))
    (cap,) = engine.capture([TEXT], what=("attention", "queries", "keys"))
    saved = tmp_path_factory.mktemp("cap") / "llama.npz"
    cap.save(saved)
    return cap, str(saved), str(path)


def reference(w: np.ndarray, tokens) -> dict[str, float]:
    """One head's [T, T] map -> the decoder statistics, row by row (rows 1 .. T-1)."""
    t = len(tokens)
    punct = [j for j, tok in enumerate(tokens) if tok.lstrip("Ġ") in (".", ",")]
    rows = range(1, t)
    ent = []
    for i in rows:
        p = [(1 - 1e-4) * w[i, j] + 1e-4 / (i + 1) for j in range(i + 1)]
        ent.append(-sum(x * math.log(x) for x in p))
    ind, dup = [], []
    for i in rows:
        earlier = [j for j in range(i) if tokens[j] == tokens[i]]
        if earlier:
            dup.append(sum(w[i, j] for j in earlier))
        after = [j + 1 for j in earlier if j + 1 < i]
        if after:
            ind.append(sum(w[i, j] for j in after))
    return dict(
        first=np.mean([w[i, 0] for i in rows]),
        prev=np.mean([w[i, i - 1] for i in rows]),
        self=np.mean([w[i, i] for i in rows]),
        punct=np.mean([sum(w[i, j] for j in punct) for i in rows]),
        entropy=np.mean(ent),
        induction=np.mean(ind),
        duplicate=np.mean(dup),
    )


def test_the_stats_view_of_a_decoder_shows_the_decoder_statistics(llama):
    cap = llama[0]
    doc = stats_document(cap)
    names = ["first", "prev", "self", "punct", "entropy", "induction", "duplicate"]
    assert doc["stats"] == names and doc["causal"] is True
    assert doc["classes"] == [] and doc["patterns"] == []
    got = doc["kinds"]["attention"]["head_stats"]
    att = cap.attention.astype(np.float64)
    for layer in range(att.shape[0]):
        for head in range(att.shape[1]):
            want = reference(att[layer, head], list(cap.tokens))
            for name in names:
                assert got[name][layer][head] == pytest.approx(want[name], abs=1e-5), name
    assert build_payload(cap, views=("stats",))["examples"][0]["stats"] == doc
    root = ET.fromstring(to_svg(cap, "stats"))
    labels = {"".join(e.itertext()) for e in root.iter(f"{SVG}text")}
    assert {"induction", "duplicate", "first"} <= labels
    assert not labels & {"cls", "sep", "Kovaleva class", "next_word", "pattern present"}


def test_a_grouped_query_head_is_labelled_with_the_models_key_value_head(llama):
    cap = llama[0]
    for heads in ([3], [2, 3], [1, 2], [0, 1, 2, 3]):
        sub = cap.select(heads=heads)
        want = [h // PER for h in heads]
        ex = build_payload(sub, views=("neuron",))["examples"][0]
        assert ex["kv_groups"] == {"heads": want, "of": 2}
        entry, _ = pack_example(sub, ("neuron",), True, "x", {})
        assert entry["kv_groups"] == {"heads": want, "of": 2}
        for hi, h in enumerate(heads):
            root = ET.fromstring(to_svg(sub, "neuron", layer=1, head=hi, token=5))
            title = "".join(root.find(f".//{SVG}g[@class='title']").itertext())
            assert f"head {h} (key/value head {h // PER} of 2)," in title


def test_the_cli_labels_a_selected_heads_key_value_head_and_draws_decoder_stats(llama, tmp_path):
    _, saved, _ = llama
    neuron, stats = tmp_path / "n.svg", tmp_path / "s.svg"
    args = ["--layers", "1", "--heads", "3", "--token", "5", "--quiet"]
    assert main(["view", saved, "--views", "neuron", *args, "--out", str(neuron)]) == 0
    assert "head 3 (key/value head 1 of 2)" in neuron.read_text()
    assert main(["view", saved, "--views", "stats", "--quiet", "--out", str(stats)]) == 0
    text = stats.read_text()
    assert "Decoder head statistics" in text and "Kovaleva" not in text


def test_a_served_grouped_query_head_is_labelled_as_a_local_one(llama, tmp_path):
    """Through a server the capture has no config; the views still say "of 2" (the
    model's num_key_value_heads), in the page data and the static neuron export."""
    from local_server import running_server

    import jaxattn
    from jaxattn.client import AttentionClient

    engine = jaxattn.load(llama[2], buckets=(32,))
    with running_server(engine) as (_, address):
        with AttentionClient(address) as client:
            (cap,) = client.capture([TEXT], what=("attention", "queries", "keys"), heads=[3])
        neuron = tmp_path / "n.svg"
        args = ["--server", address, "--layers", "1", "--heads", "3", "--token", "5"]
        assert (
            main(["view", TEXT, "--views", "neuron", *args, "--quiet", "--out", str(neuron)]) == 0
        )
    assert cap.provenance["source"] == f"server {address}" and not cap.provenance["config"]
    ex = build_payload(cap, views=("neuron",))["examples"][0]
    assert ex["kv_groups"] == {"heads": [1], "of": 2}
    assert "head 3 (key/value head 1 of 2)" in neuron.read_text()


STATS = "els => els.map(e => [e.dataset.stat, +e.dataset.layer, +e.dataset.head, +e.dataset.v])"


def test_the_page_names_the_key_value_head_and_draws_decoder_stats(page, llama, tmp_path):
    """The HTML page of heads 2 and 3 (both read key/value head 1 of 2): the neuron
    view's note names it; the stats view draws the decoder statistics only."""
    from views_helpers import wait_ready

    from jaxattn.views import write_html

    cap = llama[0].select(heads=[2, 3])
    path = tmp_path / "llama.html"
    write_html(path, cap, views=("head", "neuron", "stats"), embed="float32")
    page.goto(path.as_uri())
    wait_ready(page)
    page.click('button.tab[data-view="neuron"]')
    page.select_option("#nv-head", "0")
    assert page.get_attribute("#nv-group", "data-kv") == "1"
    note = page.text_content("#nv-group")
    assert "head 2 reads key/value head 1 of 2 (heads 2, 3 of those shown" in note
    page.click('.tab[data-view="stats"]')
    page.wait_for_selector('#view-stats rect[data-stat="induction"]')
    cells = page.eval_on_selector_all("#view-stats rect", STATS)
    want = stats_document(cap)["kinds"]["attention"]["head_stats"]
    assert {stat for stat, *_ in cells} == set(want)
    for stat, layer, head, v in cells:
        if want[stat][layer][head] is not None:
            assert v == pytest.approx(want[stat][layer][head], abs=1e-5)
    titles = page.eval_on_selector_all("#view-stats h3", "els => els.map(e => e.textContent)")
    assert titles == ["Decoder head statistics"]
    assert "not shown for a decoder" in page.text_content("#sv-info")


def test_the_capture_summary_names_the_key_value_heads_of_its_keys(llama, capsys):
    # query heads 1 and 2 read key/value heads 0 and 1: keys [L, 2, T, K] as the heads
    model = llama[2]
    argv = ["capture", TEXT, "--model", model, "--heads", "1,2", "--what", "attention,keys"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "heads [1, 2]" in out
    assert "keys/values: key/value heads [0, 1] (query heads [1, 2] read [0, 1])" in out
    assert main([*argv[:-1], "attention"]) == 0  # no keys, nothing to say
    assert "key/value heads" not in capsys.readouterr().out
