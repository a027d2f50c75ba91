"""Captures of prompt + generated continuation (`capture(..., generate=N)`): from the
generated ids, equal to transformers' eager attentions on them, their boundary
(`Capture.generated_start`) kept through .npz; prompt + new tokens over the positions."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from generate_support import PROMPTS, pair_cache

import jaxattn
from jaxattn.errors import CaptureFileError, GenerationTooLongError

NEW = 5


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    return pair_cache(tmp_path_factory)


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def model(request, pairs):
    return pairs(request.param)


def test_the_capture_of_prompt_and_continuation_is_transformers_attention(model):
    name, engine, torch_model = model
    caps = engine.capture(PROMPTS[:2], generate=NEW, stop_at_eos=False, layers=[0, -1])
    gens = engine.generate(PROMPTS[:2], NEW, stop_at_eos=False)
    for cap, g in zip(caps, gens, strict=True):
        ids = g.prompt.ids + g.ids
        assert cap.tokens == g.prompt.tokens + g.tokens
        assert cap.generated_start == g.prompt.length == len(ids) - NEW
        assert cap.text == g.prompt.text and cap.sentence_b_start is None
        with torch.no_grad():
            att = torch_model(input_ids=torch.tensor([ids]), output_attentions=True).attentions
        want = np.stack([att[0][0].numpy(), att[-1][0].numpy()])
        np.testing.assert_allclose(cap.attention, want, atol=2e-5)
        # the same ids captured as one tokenised example: the same maps
        spec = engine.make_spec("attention", layers=[0, -1])
        ((_, plain),) = list(engine.run([g.sequence], spec))
        np.testing.assert_allclose(cap.attention, plain.attention, atol=1e-5)
        assert plain.generated_start == g.prompt.length


def test_the_boundary_is_kept_through_npz(pairs, tmp_path):
    name, engine, _ = pairs("gpt2")
    (cap,) = engine.capture(PROMPTS[:1], generate=3, stop_at_eos=False)
    cap.save(tmp_path / "g.npz")
    back = jaxattn.Capture.load(tmp_path / "g.npz")
    assert back.generated_start == cap.generated_start == len(cap.tokens) - 3
    assert back.stop == cap.stop == "max_new_tokens"
    assert back.tokens == cap.tokens
    (plain,) = engine.capture(PROMPTS[:1])
    plain.save(tmp_path / "p.npz")
    assert jaxattn.Capture.load(tmp_path / "p.npz").generated_start is None
    assert jaxattn.Capture.load(tmp_path / "p.npz").stop is None
    meta = json.loads(str(np.load(tmp_path / "p.npz")["__meta__"]))
    assert "generated_start" not in meta and "stop" not in meta  # as before
    dataclasses.replace(cap, stop="stop_string").save(tmp_path / "s.npz")
    with pytest.raises(CaptureFileError, match="stop is stop_string, not eos, max_new_tokens"):
        jaxattn.Capture.load(tmp_path / "s.npz")
    dataclasses.replace(cap, generated_start=None).save(tmp_path / "n.npz")
    with pytest.raises(CaptureFileError, match="stop is set without a generated_start"):
        jaxattn.Capture.load(tmp_path / "n.npz")  # as the wire refuses it
    bad = dataclasses.replace(cap, generated_start=len(cap.tokens) + 1)
    bad.save(tmp_path / "bad.npz")
    with pytest.raises(CaptureFileError, match="generated_start .* past its tokens"):
        jaxattn.Capture.load(tmp_path / "bad.npz")


def test_prompt_and_new_tokens_over_the_positions(pairs):
    name, engine, _ = pairs("gpt2")
    limit = engine.config.max_length
    length = engine.tokenize(PROMPTS[:1])[0].length
    new = limit - length + 1
    with pytest.raises(GenerationTooLongError) as e:
        engine.generate(PROMPTS[:2], new)
    assert str(e.value).startswith(
        f"text 0: its {length} prompt tokens + {new} new tokens = {limit + 1}, over the "
        f"model's limit of {limit} positions"
    )
    (g,) = engine.generate(PROMPTS[:1], new, too_long="truncate", stop_at_eos=False)
    assert g.stop == "limit" and g.prompt.length + len(g.ids) == limit
    kept = engine.generate([PROMPTS[0], "a"], new, too_long="skip", stop_at_eos=False)
    assert [g.prompt.text for g in kept] == ["a"]
    caps = engine.capture([PROMPTS[0], "a"], generate=new, too_long="skip", stop_at_eos=False)
    assert len(caps) == 1 and caps[0].text == "a" and caps[0].length == 1 + new
