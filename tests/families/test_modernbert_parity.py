"""ModernBERT: converted, captured in one padded call, and equal to the eager torch model.

Two tiny checkpoints (modernbert_fixture): biases off (as the released
models; the bare ModernBertModel) and every bias on, saved with the MLM head
(which is skipped). Both: 4 layers, global attention in layers 0 and 3
(global_attn_every_n_layers=3), a local window of 8 (|i - j| <= 4) in layers
1 and 2, so the ~40-token text reaches far outside it, RoPE bases 1000
(global) and 30 (local). Every quantity is compared with the torch model run
on each text alone (modernbert_reference: HF's own rotated q/k/v and
attention weights, float64 naive norms).
"""

from __future__ import annotations

import numpy as np
import pytest
from hf_fixtures import EXAMPLE_A, EXAMPLE_B, load_tokenizer, long_text
from modernbert_fixture import BIASES_ON, load_modernbert_torch, make_modernbert_checkpoint
from modernbert_reference import modernbert_reference
from reference import assert_matches

import jaxattn
from jaxattn.engine import rotary

VARIANTS = {"plain": dict(mlm=False), "biases": dict(BIASES_ON, mlm=True)}
# Compiling every quantity costs ~20 s a checkpoint on 2 cores: the released
# layout (plain) captures all of them; the biases variant what its biases move.
BIASED = ("attention", "scores", "queries", "keys", "values", "hidden_states")
LOCAL_LAYERS = (1, 2)


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def setup(request, tmp_path_factory):
    path = make_modernbert_checkpoint(
        tmp_path_factory.mktemp(request.param), **VARIANTS[request.param]
    )
    tok = load_tokenizer(path)
    texts = [EXAMPLE_A, (EXAMPLE_A, EXAMPLE_B), "Hello world!", long_text(tok, 40), ""]
    engine = jaxattn.load(path, buckets=(48,))  # one shape: one compilation
    # Every quantity but the head statistics (generic code, tested on BERT): a cheaper compile.
    every = [q for q in engine.config.quantities() if "stats" not in q]
    what = every if request.param == "plain" else BIASED
    caps = engine.capture(texts, what=what)
    return request.param, path, tok, texts, engine, caps


def _inputs(tok, text):
    a, b = (text, None) if isinstance(text, str) else text
    return tok(a, b, return_tensors="pt")


def test_info_and_config(setup):
    name, _, _, _, engine, caps = setup
    info, c = engine.info, engine.config
    assert info.family == "modernbert" and (info.layers, info.heads, info.hidden) == (4, 3, 18)
    assert (c.norm, c.ffn, c.absolute_positions, c.type_vocab_size) == ("pre", "glu", False, 0)
    assert (c.rotary.global_every, c.rotary.local_window) == (3, 8)
    assert (c.rotary.global_theta, c.rotary.local_theta) == (1000.0, 30.0)
    assert c.norm_bias == c.attention_bias == c.mlp_bias == (name == "biases")
    assert "scores_c2p" not in info.quantities and "mlm_head" not in engine.extra_params
    assert len(caps[3].tokens) >= 40


def test_tokens_equal_the_checkpoints_own_tokenizer(setup):
    _, _, tok, texts, _, caps = setup
    for text, cap in zip(texts, caps, strict=True):
        ids = _inputs(tok, text)["input_ids"][0].tolist()
        assert list(cap.tokens) == tok.convert_ids_to_tokens(ids), text
    assert caps[1].sentence_b_start == len(tok(EXAMPLE_A)["input_ids"])  # [CLS] a [SEP] | b [SEP]
    assert caps[1].tokens[0] == "[CLS]" and caps[1].tokens.count("[SEP]") == 2
    assert caps[0].sentence_b_start is None and caps[4].tokens == ("[CLS]", "[SEP]")


def test_every_quantity_equals_the_torch_reference(setup, monkeypatch):
    name, path, tok, texts, engine, caps = setup
    model = load_modernbert_torch(path)
    compared = [q for q in engine.config.quantities() if "stats" not in q]
    if name != "plain":
        compared = list(BIASED)
    for text, cap in zip(texts, caps, strict=True):
        ref = modernbert_reference(model, _inputs(tok, text), monkeypatch)
        assert_matches(cap, ref, compared, f"{name} {text!r}")


def test_local_layers_give_exact_zeros_outside_the_window(setup):
    _, _, _, _, engine, caps = setup
    alpha = np.asarray(caps[3].attention)  # [L, H, T, T], the long text
    outside = ~rotary.window_mask(alpha.shape[-1], engine.config.rotary.local_window)
    assert outside.sum() > alpha.shape[-1] * 20  # most pairs lie outside
    for layer in range(alpha.shape[0]):
        cut = alpha[layer][:, outside]
        assert (cut == 0).all() if layer in LOCAL_LAYERS else (cut > 0).all(), layer
    # Scores stay defined outside the window (they just get no weight).
    assert np.isfinite(caps[3].scores).all()
