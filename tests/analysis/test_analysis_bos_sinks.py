"""The attention sink with and without BOS: hand-made maps with known shares, and the
study on the tiny GPT-2 (no BOS of its own) and Llama (prepends <s>) against
transformers' eager attention of the two token sequences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from analysis_helpers import make_capture
from gpt2_fixture import make_gpt2_checkpoint  # noqa: E402
from llama_fixture import make_llama_checkpoint  # noqa: E402

import jaxattn
from jaxattn.analysis.bos_sinks import bos_sink_study, bos_variants
from jaxattn.analysis.decoder import BosSinks, bos_sink_shares
from jaxattn.errors import TooLongError, UsageError

TEXTS = ["The cat sat on the mat.", "Hello, world.", "a", "I went to the store."]


def _causal(rows):
    """A [T, T] lower-triangular map from its rows' visible prefixes."""
    t = len(rows)
    w = np.zeros((t, t))
    for i, r in enumerate(rows):
        w[i, : i + 1] = r
    return w


def test_hand_made_shares():
    # [BOS, t0, t1, t2]: rows of t1 and t2 are 2 and 3.
    with_bos = _causal([[1], [0.5, 0.5], [0.6, 0.3, 0.1], [0.2, 0.4, 0.2, 0.2]])
    # [t0, t1, t2]: rows of t1 and t2 are 1 and 2.
    without = _causal([[1], [0.9, 0.1], [0.7, 0.1, 0.2]])
    got = bos_sink_shares(with_bos[None, None], without[None, None])
    assert got["bos"][0, 0] == pytest.approx((0.6 + 0.2) / 2)
    assert got["first_after_bos"][0, 0] == pytest.approx((0.3 + 0.4) / 2)
    assert got["first_without_bos"][0, 0] == pytest.approx((0.9 + 0.7) / 2)
    sinks = BosSinks()
    sinks.update(with_bos[None, None], without[None, None])
    sinks.update(np.eye(4)[None, None], np.eye(3)[None, None])  # self-only heads: all 0
    res = sinks.result()
    assert sinks.examples == 2
    assert res["first_without_bos"][0, 0] == pytest.approx(0.8 / 2)
    assert res["shift"][0, 0] == pytest.approx(0.8 / 2 - 0.7 / 4)


def test_a_one_token_text_has_no_rows_and_shapes_are_checked():
    got = bos_sink_shares(np.eye(2)[None], np.eye(1)[None])
    assert all(np.isnan(v).all() for v in got.values())
    sinks = BosSinks()
    sinks.update(np.eye(2)[None], np.eye(1)[None])
    assert sinks.examples == 0 and sinks.result() == {}
    with pytest.raises(UsageError, match="one token longer"):
        bos_sink_shares(np.eye(3), np.eye(3))


def test_the_shares_of_two_captures_are_those_of_their_attention():
    with_bos = _causal([[1], [0.5, 0.5], [0.6, 0.3, 0.1]])[None, None]
    without = _causal([[1], [0.9, 0.1]])[None, None]
    caps = [make_capture(w, tokens=list("abc"[: w.shape[-1]])) for w in (with_bos, without)]
    got = bos_sink_shares(*caps)  # was a TypeError from float() of a Capture
    assert got["first_without_bos"][0, 0] == pytest.approx(0.9)  # t1's weight on t0
    for name, value in bos_sink_shares(with_bos, without).items():
        np.testing.assert_allclose(got[name], value, rtol=1e-6)


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def model(request, tmp_path_factory):
    from transformers import AutoModelForCausalLM

    make = make_gpt2_checkpoint if request.param == "gpt2" else make_llama_checkpoint
    path = make(tmp_path_factory.mktemp(request.param))
    engine = jaxattn.load(path, buckets=(16,))
    torch_model = AutoModelForCausalLM.from_pretrained(
        str(path), attn_implementation="eager", local_files_only=True
    ).eval()
    return request.param, engine, torch_model


def test_the_study_against_transformers(model):
    name, engine, torch_model = model
    tokenized = engine.tokenize(TEXTS)
    bos_id = engine.tokenizer.hf.bos_token_id
    # Llama's tokenizer prepends BOS, GPT-2's does not.
    assert (tokenized[0].ids[0] == bos_id) == (name == "llama")
    pairs = bos_variants(engine, tokenized)
    assert len(pairs) == 3  # "a" is one token without BOS
    res = bos_sink_study(engine, TEXTS)
    assert res["examples"] == 3 and res["skipped"] == 1
    want = {k: 0.0 for k in ("bos", "first_after_bos", "first_without_bos")}
    for with_bos, without in pairs:
        assert with_bos.ids == (bos_id, *without.ids)
        maps = []
        for e in (with_bos, without):
            with torch.no_grad():
                out = torch_model(input_ids=torch.tensor([e.ids]), output_attentions=True)
            maps.append(torch.stack(out.attentions)[:, 0].double().numpy())  # [L, H, T, T]
        a, b = maps
        want["bos"] += a[..., 2:, 0].mean(-1) / 3
        want["first_after_bos"] += a[..., 2:, 1].mean(-1) / 3
        want["first_without_bos"] += b[..., 1:, 0].mean(-1) / 3
    for key, value in want.items():
        np.testing.assert_allclose(res[key], value, atol=2e-6, err_msg=key)
    np.testing.assert_allclose(
        res["shift"], want["first_without_bos"] - want["first_after_bos"], atol=4e-6
    )


def test_an_encoder_is_refused():
    from types import SimpleNamespace

    from jaxattn.config import tiny

    with pytest.raises(UsageError, match="not a decoder"):
        bos_variants(SimpleNamespace(config=tiny()), [])


def test_the_limit_counts_texts_used_and_errors_name_the_inputs_place(model):
    # --sink-examples N: the first N texts the study can use ("a" is one token
    # without BOS), not the first N of the input.
    _, engine, _ = model
    res = bos_sink_study(engine, TEXTS, limit=3)
    assert res["examples"] == 3 and res["skipped"] == 1
    whole = bos_sink_study(engine, TEXTS)
    np.testing.assert_allclose(res["bos"], whole["bos"], rtol=0, atol=1e-6)
    res = bos_sink_study(engine, TEXTS, limit=2)
    assert res["examples"] == 2 and res["skipped"] == 0  # the rest is not read
    np.testing.assert_allclose(res["bos"], bos_sink_study(engine, TEXTS[:2])["bos"], atol=1e-6)
    many = [*TEXTS] * 20 + ["word " * 200]  # past the first chunk of texts read
    with pytest.raises(TooLongError) as caught:
        bos_sink_study(engine, many)
    assert caught.value.index == len(many) - 1
    assert str(caught.value).startswith(f"text {len(many) - 1} is ")
