"""DeBERTa-v2/v3: converted, captured in one padded call, and equal to the eager torch model.

Two tiny checkpoints (deberta_fixture): the v3 layout (no absolute positions,
share_att_key, c2p + p2c, 8 log buckets, LayerNorm-ed table) and a v2-like
one saved with its masked-LM head (absolute positions, token types, its own
p2c projection and p2c only, no buckets with a 12-position span, so distances
beyond it clamp, E=13 embeddings projected before the LayerNorm). Texts of
~40 tokens reach the logarithmic buckets. Every quantity, the score terms
included, is compared with the torch model run on each text alone
(deberta_reference); the v2-like model captures the quantities it changes (WHAT).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from deberta_fixture import V2_LIKE, load_deberta_torch, make_deberta_checkpoint
from deberta_reference import base_model, deberta_reference
from hf_fixtures import EXAMPLE_A, EXAMPLE_B, load_tokenizer, long_text
from reference import assert_matches

import jaxattn

VARIANTS = {
    "v3": dict(overrides={}, mlm=False),
    "v2": dict(
        overrides=dict(
            V2_LIKE,
            pos_att_type=["p2c"],
            position_buckets=-1,
            max_relative_positions=12,
            embedding_size=13,
            num_hidden_layers=2,
        ),
        mlm=True,
    ),
}
TERMS = {"v3": ("c2c", "c2p", "p2c"), "v2": ("c2c", "p2c")}
# v3 captures every quantity. The v2-like model differs in what reaches the scores and the
# hidden states; its norm quantities are the same code on the same alpha, v and W_O, so it
# captures only the rest (one compilation of every quantity costs ~8 s more here).
WHAT = {
    "v3": None,
    "v2": (
        "attention",
        "scores",
        "scores_c2c",
        "scores_p2c",
        "queries",
        "keys",
        "values",
        "hidden_states",
    ),
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def setup(request, tmp_path_factory):
    variant = VARIANTS[request.param]
    path = make_deberta_checkpoint(
        tmp_path_factory.mktemp(request.param), mlm=variant["mlm"], **variant["overrides"]
    )
    tok = load_tokenizer(path)
    texts = [EXAMPLE_A, (EXAMPLE_A, EXAMPLE_B), "Hello world!", long_text(tok, 40), ""]
    engine = jaxattn.load(path, buckets=(48,))  # one shape: one compilation
    # Every quantity but the head statistics (generic code, tested on BERT): one cheaper compile.
    every = [q for q in engine.config.quantities() if "stats" not in q]
    caps = engine.capture(texts, what=WHAT[request.param] or every)
    return request.param, path, tok, texts, engine, caps


def _inputs(tok, text):
    a, b = (text, None) if isinstance(text, str) else text
    return tok(a, b, return_tensors="pt", return_token_type_ids=True)


def test_info_and_quantities(setup):
    name, _, _, texts, engine, caps = setup
    info = engine.info
    layers = 3 if name == "v3" else 2
    assert info.family == "deberta-v2" and (info.layers, info.heads, info.hidden) == (layers, 3, 21)
    assert engine.config.score_terms() == TERMS[name]
    assert {f"scores_{t}" for t in TERMS[name]} <= set(info.quantities)
    assert ("scores_c2p" in info.quantities) == (name == "v3")  # v2-like: p2c only
    assert len(caps[3].tokens) >= 40  # past the 8 buckets' linear range (v3) / the span (v2)


def test_tokens_equal_the_checkpoints_own_tokenizer(setup):
    _, _, tok, texts, _, caps = setup
    for text, cap in zip(texts, caps, strict=True):
        ids = _inputs(tok, text)["input_ids"][0].tolist()
        assert list(cap.tokens) == tok.convert_ids_to_tokens(ids), text
    assert caps[1].sentence_b_start == len(tok(EXAMPLE_A)["input_ids"])  # [CLS] a [SEP] | b [SEP]
    assert caps[1].tokens[0] == "[CLS]" and caps[1].tokens.count("[SEP]") == 2


def test_every_quantity_equals_the_torch_reference(setup, monkeypatch):
    name, path, tok, texts, engine, caps = setup
    model = load_deberta_torch(path)
    compared = [q for q in WHAT[name] or engine.config.quantities() if "stats" not in q]
    for text, cap in zip(texts, caps, strict=True):
        ref = deberta_reference(model, _inputs(tok, text), monkeypatch)
        assert_matches(cap, ref, compared, f"{name} {text!r}")
        # The terms are the score, split: their sum is the captured scores.
        total = sum(getattr(cap, f"scores_{t}").astype(np.float64) for t in TERMS[name])
        np.testing.assert_allclose(total, cap.scores, atol=1e-5 * max(1.0, np.abs(total).max()))
        for t in TERMS[name][1:]:  # every position term matters
            assert np.abs(getattr(cap, f"scores_{t}")).max() > 0.1


def test_masked_lm_head_equals_torch(setup):
    name, path, tok, texts, engine, caps = setup
    if name != "v2":
        assert "mlm_head" not in engine.extra_params
        return
    from jaxattn.engine.mlm import MaskedLM

    model = load_deberta_torch(path)
    assert type(model).__name__ == "DebertaV2ForMaskedLM" and base_model(model) is model.deberta
    lm = MaskedLM(engine, engine.tokenize([EXAMPLE_A]), mask_rate=0.3, seed=0)
    for text, cap in zip(texts[:2], caps[:2], strict=True):
        with torch.no_grad():
            want = model(**_inputs(tok, text)).logits[0].double().numpy()
        got = lm.logits(np.asarray(cap.hidden_states[-1]))
        np.testing.assert_allclose(got, want, atol=1e-4 * max(1.0, np.abs(want).max()), rtol=0)


def test_extra_hf_tensors_load_and_contradictions_are_named(setup, tmp_path):
    import json
    import shutil

    from safetensors.numpy import load_file, save_file

    from jaxattn.errors import CheckpointError

    name, path, *_ = setup
    if name != "v3":
        return
    copy = Path(shutil.copytree(path, tmp_path / "copy"))
    weights = load_file(copy / "model.safetensors")
    # What the hub's v3 checkpoints carry beside the encoder (HF ignores them too).
    extra = {
        "embeddings.position_embeddings.weight": np.zeros((67, 21), np.float32),
        "lm_predictions.lm_head.bias": np.zeros((245,), np.float32),
    }
    save_file({**weights, **extra}, copy / "model.safetensors", metadata={"format": "pt"})
    assert jaxattn.load(copy).config.relative_rows == 16
    config = json.loads((copy / "config.json").read_text())
    for change, message in (
        (dict(position_buckets=6), r"rel_embeddings.weight has shape \(16, 21\).*position_buckets"),
        (dict(share_att_key=False), r"lack 'encoder.layer.0.attention.self.pos_query_proj"),
    ):
        (copy / "config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(CheckpointError, match=message):
            jaxattn.load(copy)
