"""docs/python.md's "Decoder analyses" snippet runs as written on the tiny random GPT-2
and Llama (grouped-query), "gpt2" replaced by their directories, and gives the
documented [L, H] tables; its induction score is checked against a loop written here
over the repeated sequence's second half (row of r_k's second occurrence -> the token
after its first occurrence)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "python.md"


def snippet() -> str:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Decoder analyses") :]
    return re.search(r"```python\n(.*?)```", section, re.S)[1]


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_the_decoder_analyses_snippet_runs_as_documented(family, tmp_path):
    from gpt2_fixture import make_gpt2_checkpoint
    from llama_fixture import make_llama_checkpoint

    make = {"gpt2": make_gpt2_checkpoint, "llama": make_llama_checkpoint}[family]
    path = make(tmp_path / family)
    code = snippet()
    assert 'jaxattn.load("gpt2")' in code
    scope: dict = {}
    exec(code.replace('jaxattn.load("gpt2")', f"jaxattn.load({str(path)!r})"), scope)
    layers, heads = {"gpt2": (3, 3), "llama": (3, 4)}[family]
    for name in ("induction", "previous", "sink", "copying"):
        value = np.asarray(scope[name])
        assert value.shape == (layers, heads) and np.isfinite(value).all(), name
    for name in ("first", "prev", "self", "punct", "entropy", "induction", "duplicate"):
        assert scope["stats"][name].shape == (layers, heads), name
    # the induction score by hand: 20 distinct tokens twice, after a BOS where one is added
    engine, text = scope["engine"], scope["text"]
    (cap,) = engine.capture([text])
    att, start = cap.attention.astype(np.float64), cap.length - 40
    want = np.mean([att[..., start + 20 + k, start + k + 1] for k in range(20)], axis=0)
    np.testing.assert_allclose(scope["induction"], want, atol=1e-6)
