"""Mixing ratios (Kobayashi et al. 2021) on hand-computable weights."""

from __future__ import annotations

import numpy as np
import pytest

from jaxattn.analysis import MixingRatios, mixing_ratio_rows
from jaxattn.analysis.mixing import contribution_weights
from jaxattn.capture import Capture


def _capture(attention, **extra):
    layers, heads, t = attention.shape[0], attention.shape[1], attention.shape[-1]
    return Capture(tokens=tuple(f"w{i}" for i in range(t)), sentence_b_start=None,
                   layers=tuple(range(layers)), heads=tuple(range(heads)), dtype="float32",
                   tensors={"attention": attention, **extra})  # fmt: skip


def test_ratio_rows_by_hand():
    w = np.array([[3.0, 1.0], [0.0, 2.0]])
    np.testing.assert_allclose(mixing_ratio_rows(w), [0.25, 0.0])
    assert mixing_ratio_rows(np.zeros((2, 2))).tolist() == [0.0, 0.0]


def test_uniform_and_identity_maps():
    t = 4
    uniform = np.full((1, 2, t, t), 1 / t, np.float32)
    ident = np.broadcast_to(np.eye(t, dtype=np.float32), (1, 2, t, t)).copy()
    mix = MixingRatios(("Attn-W", "AttnRes-W"))
    mix.update(_capture(uniform))
    r = mix.result()
    assert r["Attn-W"] == pytest.approx([1 - 1 / t])
    # AttnRes-W: 0.5 * (3/4 off-diagonal) of a total 1 -> 3/8.
    assert r["AttnRes-W"] == pytest.approx([0.5 * (1 - 1 / t)])
    mix = MixingRatios(("Attn-W",))
    mix.update(_capture(ident))
    assert mix.result()["Attn-W"] == pytest.approx([0.0])


def test_norm_measures_use_their_quantities_and_weight_tokens_equally():
    a = np.full((1, 1, 2, 2), 0.5, np.float32)
    res = np.array([[[1.0, 3.0], [1.0, 1.0]]], np.float32)  # r = [0.75, 0.5]
    mix = MixingRatios(("AttnRes-N",))
    mix.update(_capture(a, attn_res_norm=res))
    res3 = np.array([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]], np.float32)
    mix.update(_capture(np.full((1, 1, 3, 3), 1 / 3, np.float32), attn_res_norm=res3))
    # token-weighted: (0.75 + 0.5 + 0 + 0 + 0) / 5
    assert mix.result()["AttnRes-N"] == pytest.approx([0.25])


def test_a_missing_quantity_is_named():
    with pytest.raises(ValueError, match="attn_res_ln_norm"):
        contribution_weights(_capture(np.ones((1, 1, 2, 2), np.float32)), "AttnResLn-N")
    with pytest.raises(ValueError, match="Attn-W"):
        contribution_weights(_capture(np.ones((1, 1, 2, 2), np.float32)), "Attn-X")
