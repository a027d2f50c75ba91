"""Mixing ratios (Kobayashi et al. 2021) on hand-computable weights."""

from __future__ import annotations

import numpy as np
import pytest

from jaxattn.analysis import MixingRatios, mixing_ratio_rows
from jaxattn.analysis.mixing import MEASURES, NEEDS, token_ratios
from jaxattn.capture import Capture
from jaxattn.errors import UsageError
from jaxattn.quantities import NORM_MEASURES, QUANTITIES


def _capture(attention, **extra):
    layers, heads, t = attention.shape[0], attention.shape[1], attention.shape[-1]
    return Capture(
        tokens=tuple(f"w{i}" for i in range(t)),
        sentence_b_start=None,
        layers=tuple(range(layers)),
        heads=tuple(range(heads)),
        dtype="float32",
        tensors={"attention": attention, **extra},
    )


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


def test_norm_measures_read_their_column_of_mixing_ratio_and_weight_tokens_equally():
    a = np.full((1, 1, 2, 2), 0.5, np.float32)
    r2 = np.zeros((1, 2, 3), np.float32)
    r2[0, :, NORM_MEASURES.index("AttnRes-N")] = [0.75, 0.5]
    r3 = np.zeros((1, 3, 3), np.float32)
    r3[0, :, NORM_MEASURES.index("AttnRes-N")] = [0.0, 0.25, 0.0]
    r3[0, :, NORM_MEASURES.index("Attn-N")] = 1.0  # another column: not read for AttnRes-N
    mix = MixingRatios(("AttnRes-N",))
    mix.update(_capture(a, mixing_ratio=r2))
    mix.update(_capture(np.full((1, 1, 3, 3), 1 / 3, np.float32), mixing_ratio=r3))
    # token-weighted: (0.75 + 0.5 + 0 + 0.25 + 0) / 5
    assert mix.result() == {"AttnRes-N": pytest.approx([0.3])}


def test_every_measure_names_a_quantity_and_the_norm_measures_are_the_m_axis():
    assert set(MEASURES) == set(NEEDS) and set(NORM_MEASURES) <= set(MEASURES)
    assert all(need in QUANTITIES for need in NEEDS.values())
    assert QUANTITIES["mixing_ratio"].axes == "LTM" and QUANTITIES["mixing_ratio"].probability


def test_per_pair_norm_maps_are_not_read_as_mixing_ratios():
    # A capture with only the per-pair norms (jaxattn 0.2's input) has no norm measure.
    a = np.full((1, 1, 2, 2), 0.5, np.float32)
    mix = MixingRatios()
    mix.update(_capture(a, attn_res_norm=np.ones((1, 2, 2), np.float32)))
    assert set(mix.result()) == {"Attn-W", "AttnRes-W"}


def test_a_missing_quantity_is_named_with_its_what():
    with pytest.raises(UsageError, match="'mixing_ratio'.*--what mixing_ratio"):
        token_ratios(_capture(np.ones((1, 1, 2, 2), np.float32)), "AttnResLn-N")
    with pytest.raises(UsageError, match="Attn-W"):
        token_ratios(_capture(np.ones((1, 1, 2, 2), np.float32)), "Attn-X")


def test_a_causal_corpus_leaves_each_row_0_out_of_the_means():
    # Causal maps: row 0 sees only itself (ratio 0 for every measure, whatever the model).
    # Rows 1 .. n-1 by hand: Attn-W is 1 - own weight, AttnRes-W half of it.
    a = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], np.float32)[None, None]
    b = np.array([[1.0, 0.0], [0.9, 0.1]], np.float32)[None, None]
    r_a = np.zeros((1, 3, 3), np.float32)
    r_a[0, :, NORM_MEASURES.index("AttnResLn-N")] = [0.0, 0.25, 0.125]
    r_b = np.zeros((1, 2, 3), np.float32)
    r_b[0, :, NORM_MEASURES.index("AttnResLn-N")] = [0.0, 0.5]
    caps = [_capture(a, mixing_ratio=r_a), _capture(b, mixing_ratio=r_b)]
    causal, every_row = MixingRatios(causal=True), MixingRatios()
    for cap in caps:
        causal.update(cap)
        every_row.update(cap)
    # rows 1 .. n-1 of both examples: 3 rows (0.5, 0.5, 0.9 off-diagonal)
    assert causal.tokens == 3
    got = causal.result()
    assert got["Attn-W"] == pytest.approx([(0.5 + 0.5 + 0.9) / 3])
    assert got["AttnRes-W"] == pytest.approx([(0.5 + 0.5 + 0.9) / 6])
    assert got["AttnResLn-N"] == pytest.approx([(0.25 + 0.125 + 0.5) / 3])
    # every row (an encoder's mean): the two zero rows count
    assert every_row.result()["Attn-W"] == pytest.approx([(0.5 + 0.5 + 0.9) / 5])


def test_a_decoder_corpus_analysis_averages_its_mixing_ratios_causally():
    from jaxattn.analysis import CorpusAnalysis

    assert CorpusAnalysis(decoder=True).mixing.causal
    assert not CorpusAnalysis().mixing.causal


def test_a_capture_that_says_it_is_causal_is_averaged_causally_by_default():
    """MixingRatios() (causal None) reads each capture's provenance: a decoder's leaves
    its row 0 out, as MixingRatios(causal=True); a capture that does not say is an
    encoder's; an explicit causal=False takes every row whatever the capture says."""
    import dataclasses

    a = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], np.float32)[None, None]
    plain = _capture(a)
    decoder = dataclasses.replace(plain, provenance={"causal": True})
    encoder = dataclasses.replace(plain, provenance={"causal": False})
    for cap, rows in ((decoder, 2), (encoder, 3), (plain, 3)):
        m = MixingRatios()
        m.update(cap)
        assert m.tokens == rows
        assert m.result()["Attn-W"] == pytest.approx([(0.5 + 0.5) / rows])
    forced = MixingRatios(causal=False)
    forced.update(decoder)
    assert forced.tokens == 3
