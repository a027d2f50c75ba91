"""A served capture carries no model config (`provenance["config"]` is {}), yet the
report of a pre-norm encoder's captures (ModernBERT: x + f(LN(x))) must read its
mixing ratios as a pre-norm model's: the CLI takes the norm's place from the family
the server names (ModelInfo.family) and that family's table
(`jaxattn.checkpoints.families.norm_of`), for `analyze --server` and for saved captures
that came through a server alike. A tiny ModernBERT served on port 0."""

from __future__ import annotations

import json

import pytest
from modernbert_fixture import make_modernbert_checkpoint

from jaxattn.cli import main

TEXTS = ("the cat sat on the mat", "a dog ran")
# ModernBERT's norm before the FFN, named only in the pre-norm reading of report.md
PRE_NORM_WORDING = "ModernBERT's mlp_norm"


def test_each_familys_norm_place_is_its_tables():
    """As the papers and the models' code have them: BERT, RoBERTa, ELECTRA, ALBERT,
    DistilBERT and DeBERTa add then normalise (post-LN); ModernBERT and the decoders
    normalise each block's input (pre-LN)."""
    from jaxattn.checkpoints.families import FAMILIES, norm_of

    post = {"bert", "roberta", "distilbert", "electra", "albert", "deberta-v2"}
    for name in FAMILIES:
        assert norm_of(name) == ("post" if name in post else "pre"), name
    assert norm_of("a-family-of-a-newer-server") is None


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The address of a server of a tiny ModernBERT (2 layers), on port 0."""
    import jaxattn
    from service import create_server

    path = make_modernbert_checkpoint(tmp_path_factory.mktemp("mb"), num_hidden_layers=2)
    engine = jaxattn.load(path, buckets=(16,), max_batch=2)
    server, port = create_server(engine, "127.0.0.1:0", grace_s=1.0)
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(grace=0.5).wait(10)


def test_a_served_modernberts_report_reads_as_a_pre_norm_models(served, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("\n".join(TEXTS) + "\n")
    out = tmp_path / "r.json"
    argv = ["analyze", str(text), "--server", served, "--out", str(out), "--quiet"]
    assert main([*argv, "--no-head-distance"]) == 0
    assert json.loads(out.read_text())["meta"]["pre_norm"] is True
    assert PRE_NORM_WORDING in out.with_suffix(".md").read_text()

    saved = tmp_path / "c.npz"  # a capture file through the server: its config is {}
    what = "attention,alpha_fx_norm,mixing_ratio"
    capture = ["capture", TEXTS[0], "--server", served, "--what", what, "--out", str(saved)]
    assert main(capture) == 0
    from jaxattn.capture import Capture

    assert Capture.load(saved).provenance["config"] == {}
    again = tmp_path / "s.json"
    assert main(["analyze", str(saved), "--out", str(again), "--quiet"]) == 0
    assert json.loads(again.read_text())["meta"]["pre_norm"] is True
    assert PRE_NORM_WORDING in again.with_suffix(".md").read_text()
