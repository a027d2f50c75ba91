"""GPT-2's decoder statistics on the device equal the numpy reference; the analyses run.

decoder_head_stats / decoder_norm_head_stats, captured in one padded call over
texts of mixed lengths, equal `jaxattn.analysis.decoder_head_statistics` of the
same capture's attention (and of alpha_fx_norm, rows normalised), and a text
captured alone; the induction, duplicate-token, previous-token and sink
analyses run end to end on the tiny GPT-2 (gpt2_fixture).
"""

from __future__ import annotations

import numpy as np
import pytest
from gpt2_fixture import make_gpt2_checkpoint
from hf_fixtures import EXAMPLE_A, EXAMPLE_B, load_tokenizer

import jaxattn
from jaxattn.analysis import (
    AttentionSinks,
    DecoderHeads,
    decoder_head_statistics,
    duplicate_token_scores,
    induction_scores,
    normalise_rows,
    previous_token_scores,
    repeated_sequence_text,
)
from jaxattn.errors import UsageError
from jaxattn.quantities import DECODER_HEAD_STATS

WHAT = ("attention", "alpha_fx_norm", "decoder_head_stats", "decoder_norm_head_stats")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    path = make_gpt2_checkpoint(tmp_path_factory.mktemp("gpt2"))
    tok = load_tokenizer(path)
    engine = jaxattn.load(path, buckets=(48,))  # one shape: one compilation
    return tok, engine


def _table(stats):
    return np.stack([stats[name] for name in DECODER_HEAD_STATS], -1)


def test_on_device_statistics_equal_the_numpy_reference(setup):
    _, engine = setup
    texts = [EXAMPLE_A, "Hello, world. Hello, world.", "Hi", EXAMPLE_B]
    caps = engine.capture(texts, what=WHAT)
    for text, cap in zip(texts, caps, strict=True):
        assert cap.decoder_head_stats.shape == (3, 3, len(DECODER_HEAD_STATS))
        want = _table(decoder_head_statistics(cap.attention, cap.tokens))
        np.testing.assert_allclose(cap.decoder_head_stats, want, atol=2e-6, rtol=0, err_msg=text)
        norm = normalise_rows(cap.alpha_fx_norm)
        want = _table(decoder_head_statistics(norm, cap.tokens))
        np.testing.assert_allclose(cap.decoder_norm_head_stats, want, atol=2e-6, rtol=0)
        (alone,) = engine.capture([text], what=WHAT[2:])  # padding is invisible
        for name in WHAT[2:]:
            np.testing.assert_allclose(getattr(alone, name), getattr(cap, name), atol=1e-6)
    assert np.isfinite(caps[0].decoder_head_stats).all()
    punct = caps[1].decoder_head_stats[..., DECODER_HEAD_STATS.index("punct")]
    assert (punct > 0).all()  # "," and "." are punctuation


def test_encoder_statistics_point_to_the_decoder_ones(setup):
    _, engine = setup
    assert {"decoder_head_stats", "decoder_norm_head_stats"} <= set(engine.info.quantities)
    with pytest.raises(UsageError, match="ask for decoder_head_stats"):
        engine.capture([EXAMPLE_A], what="head_stats")


def test_the_decoder_analyses_run_on_a_repeated_sequence(setup):
    tok, engine = setup
    n = 6
    text, tokens = repeated_sequence_text(tok, n, seed=1)
    assert len(tokens) == 2 * n and tokens[:n] == tokens[n:] and len(set(tokens[:n])) == n
    bos = tok.bos_token
    with_bos, without = engine.capture([bos + text, text], what=("attention",))
    assert list(without.tokens) == tokens and with_bos.tokens[0] == bos
    for cap in (with_bos, without):
        for score in (
            induction_scores(cap.attention, cap.tokens),
            duplicate_token_scores(cap.attention, cap.tokens),
            previous_token_scores(cap.attention),
        ):
            assert score.shape == (3, 3) and np.isfinite(score).all()
            assert ((score >= 0) & (score <= 1 + 1e-6)).all()
    sinks = AttentionSinks(with_bos, without)
    assert sinks.difference.shape == (3, 3)
    heads = DecoderHeads()
    heads.update(with_bos)
    heads.update(without)
    out = heads.result()
    assert set(out) == {*DECODER_HEAD_STATS, "induction", "duplicate"}
    assert all(v.shape == (3, 3) for v in out.values())
    with pytest.raises(ValueError, match="fewer than the n = 100000 asked for"):
        repeated_sequence_text(tok, 100000)
