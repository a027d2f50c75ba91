"""ELECTRA, ALBERT and XLM-RoBERTa: converted, captured, and equal to the eager torch model.

Each family's tiny checkpoint (family_fixtures) is loaded by jaxattn and
captured in ONE call over singles, a pair and texts of mixed lengths (so they
are bucketed and padded together); each capture is compared with the torch
model run on that text alone, every quantity (reference.py: hooks plus a naive
float64 computation of the norm quantities).
"""

from __future__ import annotations

import pytest
from family_fixtures import make_family_checkpoint
from hf_fixtures import EXAMPLE_A, EXAMPLE_B, load_tokenizer, load_torch_model, long_text
from reference import assert_matches, torch_reference

import jaxattn

FAMILIES = ("electra", "albert", "xlm-roberta")
GRAPH = {"electra": "electra", "albert": "albert", "xlm-roberta": "roberta"}
# XLM-R runs RoBERTa's graph, whose every quantity tests/test_parity.py and the norm
# references check: here its checkpoint, tokens and graph-level quantities (one cheaper compile).
WHAT = {"xlm-roberta": ("attention", "scores", "queries", "keys", "values", "hidden_states")}
COMPARED = (
    "attention",
    "scores",
    "queries",
    "keys",
    "values",
    "hidden_states",
    "fx_norm",
    "alpha_fx_norm",
    "sum_alpha_fx_norm",
    "attn_res_norm",
    "attn_res_ln_norm",
    "mixing_ratio",
    "mixing_norm",
    "preserving_norm",
)


@pytest.fixture(scope="module", params=FAMILIES)
def setup(request, tmp_path_factory):
    family = request.param
    path = make_family_checkpoint(family, tmp_path_factory.mktemp(family))
    tok = load_tokenizer(path)
    texts = [EXAMPLE_A, (EXAMPLE_A, EXAMPLE_B), "Hello world!", long_text(tok, 40), ""]
    engine = jaxattn.load(path, buckets=(48,))  # one shape: one compilation per family
    caps = engine.capture(texts, what=WHAT.get(family, COMPARED))  # head stats: tested on BERT
    return family, path, tok, texts, engine, caps


def _inputs(tok, text):
    a, b = (text, None) if isinstance(text, str) else text
    return tok(a, b, return_tensors="pt", return_token_type_ids=True)


def test_info_names_the_graph_and_the_shared_weights(setup):
    family, path, _, _, engine, _ = setup
    info = engine.info
    assert info.family == GRAPH[family]
    assert info.layers == {"albert": 4}.get(family, 3) and info.heads == 3 and info.hidden == 21
    if family == "albert":
        assert info.shared_weights.startswith("layers 0-1 share weight set 0; layers 2-3 share")
    else:
        assert info.shared_weights == ""
    assert "scores_c2p" not in info.quantities


def test_tokens_equal_the_checkpoints_own_tokenizer(setup):
    family, _, tok, texts, _, caps = setup
    for text, cap in zip(texts, caps, strict=True):
        ids = _inputs(tok, text)["input_ids"][0].tolist()
        assert list(cap.tokens) == tok.convert_ids_to_tokens(ids), text
    pair = caps[1]
    n_a = len(tok(EXAMPLE_A)["input_ids"])
    # [CLS] a [SEP] | b [SEP]; XLM-R: <s> a </s> </s> | b </s>
    assert pair.sentence_b_start == n_a + (1 if family == "xlm-roberta" else 0)


def test_every_quantity_equals_the_torch_reference(setup):
    family, path, tok, texts, _, caps = setup
    model = load_torch_model(path)
    for text, cap in zip(texts, caps, strict=True):
        ref = torch_reference(model, family, _inputs(tok, text))
        assert_matches(cap, ref, [n for n in COMPARED if n in cap.what], f"{family} {text!r}")
