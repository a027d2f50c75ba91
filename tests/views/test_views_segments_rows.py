"""The stats-first page from the per-row statistics alone (decoder_row_head_stats,
row_head_stats and their norm twins): every head's sink, prev and entropy segments and
whole-text values equal those the page computes from the maps of the same capture; the
local share has no source. Tiny random BERT (encoder) and Mistral (decoder, sliding
window shorter than the text) from `tiny_models`, one compile each."""

from __future__ import annotations

import numpy as np
import pytest
from tiny_models import batch, capture, config_of, params_of

from jaxattn.capture import Capture
from jaxattn.engine.model import Encoder
from jaxattn.spec import CaptureSpec
from jaxattn.views.segments import segments_document

T, SEGMENT = 70, 16
MAPS = ("attention", "alpha_fx_norm")
# decoder_row_head_stats serve an encoder too (its entropy over every real key): the
# page asks an encoder for them alone (`segments_page.statistics_captures`)
ROWS = {
    "bert": ("decoder_row_head_stats", "decoder_norm_row_head_stats"),
    "bert-both": ("decoder_row_head_stats", "decoder_norm_row_head_stats")
    + ("row_head_stats", "norm_row_head_stats"),
    "mistral": ("decoder_row_head_stats", "decoder_norm_row_head_stats"),
}


@pytest.fixture(scope="module", params=ROWS)
def pair(request) -> tuple[Capture, Capture, bool]:
    """(a capture of the maps, one of the per-row statistics only, causal) of one text."""
    family = request.param.removesuffix("-both")
    config = config_of(family, num_hidden_layers=1)
    what = MAPS + ROWS[request.param]
    spec = CaptureSpec(what=what, layers=(0,), heads=tuple(range(config.num_heads)))
    data = batch(config, (T,), pair_from=T, punct=0.2)
    out = capture(Encoder(config), params_of(config), spec, data)
    causal = family == "mistral"
    base = dict(
        tokens=tuple(f"w{i}" for i in range(T)),
        sentence_b_start=None,
        layers=(0,),
        heads=spec.heads,
        dtype="float32",
        provenance={"causal": causal},
    )
    maps = Capture(tensors={q: out[q][0] for q in MAPS}, **base)
    rows = Capture(tensors={q: out[q][0] for q in ROWS[request.param]}, **base)
    return maps, rows, causal


def test_the_rows_give_every_heads_segments_as_its_map_does(pair):
    maps, rows, causal = pair
    from_maps = segments_document(maps, segment=SEGMENT)
    from_rows = segments_document(rows, segment=SEGMENT)
    assert from_rows["causal"] is causal and from_rows["bounds"] == from_maps["bounds"]
    heads = len(maps.heads)
    for kind, first in (("attention", "decoder_row_head_stats"), ("norm", "decoder_norm_")):
        m, r = from_maps["kinds"][kind], from_rows["kinds"][kind]
        assert m["source"] == [["maps"] * heads]
        assert all(s.startswith(first) for s in r["source"][0]), r["source"]
        for stat in ("sink", "prev", "entropy"):
            for h in range(heads):
                want = np.array(m["segments"][stat][0][h], float)
                got = np.array(r["segments"][stat][0][h], float)
                assert len(got) == -(-T // SEGMENT)
                np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6, err_msg=stat)
                whole = r["whole"][stat][0][h]
                assert whole == pytest.approx(m["whole"][stat][0][h], rel=2e-5, abs=1e-6)
        assert r["segments"]["local"] == [[None] * heads]  # no per-row source
        assert r["whole"]["local"] == [[None] * heads]
