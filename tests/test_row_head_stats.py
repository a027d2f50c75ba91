"""The per-row head statistics (row_head_stats, decoder_row_head_stats and their norm
twins) of tiny random models, dense and blockwise: against hand-written numpy of the
dense path's own trimmed maps, blockwise against dense, and their means against the
whole-text statistics (head_stats, decoder_head_stats) of the same capture."""

import numpy as np
import pytest
from row_stats_reference import decoder_rows, encoder_rows, normalised
from tiny_models import batch, capture, config_of, params_of

from jaxattn.engine.model import Encoder
from jaxattn.errors import UsageError
from jaxattn.quantities import HEAD_STATS, QUANTITIES
from jaxattn.spec import CaptureSpec, make_spec
from jaxattn.token_classes import CLS_BIT, SEP_BIT

T, BLOCK = 45, 16  # the block does not divide T
ROWS = ("row_head_stats", "norm_row_head_stats")
DECODER_ROWS = ("decoder_row_head_stats", "decoder_norm_row_head_stats")
MEANS = {
    "row_head_stats": "head_stats",
    "norm_row_head_stats": "norm_head_stats",
    "decoder_row_head_stats": "decoder_head_stats",
    "decoder_norm_row_head_stats": "decoder_norm_head_stats",
}
CASES = {  # family: the per-row quantities it is asked for (a decoder refuses the encoder's)
    "bert": ROWS + DECODER_ROWS,  # an encoder pair, padding
    "mistral": DECODER_ROWS,  # a decoder with a sliding window (37 < T), GQA
}


@pytest.fixture(scope="module", params=CASES)
def captured(request):
    """(family, batch, {attention: capture}) of every statistic, means and rows, with the
    maps they are checked against (all layers and heads)."""
    family = request.param
    config = config_of(family, num_hidden_layers=1)  # the cost is the 2 compiles
    params = params_of(config)
    data = batch(config, (T, T - 11), pair_from=20, punct=0.25)
    rows = CASES[family]
    what = ("attention", "alpha_fx_norm", *rows, *(MEANS[r] for r in rows))
    spec = CaptureSpec(
        what=what, layers=tuple(range(config.num_layers)), heads=tuple(range(config.num_heads))
    )
    out = {}
    for attention in ("dense", "blockwise"):
        model = Encoder(config, attention=attention, block=BLOCK)
        out[attention] = capture(model, params, spec, data)
    return family, data, out


def test_rows_equal_numpy_of_the_maps_and_blockwise_equals_dense(captured):
    family, (_, _, mask, classes), out = captured
    dense, block = out["dense"], out["blockwise"]
    for b, n in enumerate(mask.sum(-1)):
        maps = {
            False: dense["attention"][b][:, :, :n, :n],
            True: normalised(dense["alpha_fx_norm"][b][:, :, :n, :n].astype(np.float64)),
        }
        for name in CASES[family]:
            norm = name.startswith(("norm_", "decoder_norm_"))
            if name.startswith("decoder_"):  # an encoder's rows see every key
                want = [decoder_rows(m, classes[b], family != "bert") for m in maps[norm]]
            else:
                want = [encoder_rows(m, classes[b]) for m in maps[norm]]
            want = np.stack(want)
            got = dense[name][b][:, :, :n]
            assert got.shape == want.shape == (*maps[norm].shape[:3], want.shape[-1])
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6, err_msg=name)
            assert np.isnan(dense[name][b][:, :, n:]).all(), name  # padded rows
            np.testing.assert_allclose(block[name][b], dense[name][b], rtol=1e-4, atol=2e-5)
            assert not np.isnan(want).all(), name


def test_the_means_over_rows_are_the_whole_text_statistics(captured):
    """head_stats is the mean of row_head_stats over the real rows (prev: rows 1 .. n-1
    summed, divided by n; the class rows' statistics over their rows only);
    decoder_head_stats the mean over rows 1 .. n-1."""
    family, (_, _, mask, classes), out = captured
    for path in ("dense", "blockwise"):
        got = out[path]
        for b, n in enumerate(mask.sum(-1)):
            bits = classes[b, :n]
            for name in CASES[family]:
                rows, means = got[name][b][:, :, :n], got[MEANS[name]][b]
                if name.startswith("decoder_"):
                    want = rows[:, :, 1:].mean(2)
                else:
                    want = rows.mean(2)  # cls .. entropy: every real row
                    col = HEAD_STATS.index
                    prev = rows[:, :, 1:, col("prev")].sum(-1) / n  # Clark et al.'s prev
                    np.testing.assert_allclose(means[..., col("prev")], prev, rtol=1e-5)
                    cls, sep = (bits & CLS_BIT) != 0, (bits & SEP_BIT) != 0
                    for stat, picked, of in (
                        ("entropy_cls", cls, "entropy"),
                        ("sep_sep", sep, "sep"),
                        ("rest_sep", ~sep, "sep"),
                    ):
                        want[..., col(stat)] = rows[:, :, picked, col(of)].mean(-1)
                np.testing.assert_allclose(means, want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_a_decoder_refuses_the_encoders_rows_and_uint8_every_row_statistic():
    config = config_of("mistral")
    kw = dict(layers=None, heads=None, num_layers=2, num_heads=4, available=config.quantities())
    for name in ROWS:
        with pytest.raises(UsageError, match=f"'{name}' is not computed for a decoder"):
            make_spec(what=(name,), dtype="float32", refused=config.refused_quantities(), **kw)
        assert f"decoder_{name}" in QUANTITIES
    for name in ROWS + DECODER_ROWS:
        assert not QUANTITIES[name].uint8
        with pytest.raises(UsageError, match=name):
            make_spec(what=(name,), dtype="uint8", **kw)
