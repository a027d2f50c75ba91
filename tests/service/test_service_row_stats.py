"""The per-row head statistics end to end: through the server and the client (each
example's rows trimmed to its length, against numpy of its attention map), a selection
of query rows that cuts the maps but never the per-row statistics, and a saved file's
round trip."""

from __future__ import annotations

import numpy as np
import pytest
from row_stats_reference import decoder_rows, encoder_rows
from service_support import TEXTS

from jaxattn.token_classes import class_bits

WHAT = ("attention", "row_head_stats", "decoder_row_head_stats", "head_stats")


@pytest.fixture(scope="module")
def caps(address):
    from jaxattn.client import AttentionClient

    with AttentionClient(address, timeout=60.0) as c:
        return c.capture(TEXTS, what=WHAT)


def test_the_client_gets_each_examples_rows_as_numpy_of_its_map(caps):
    assert len({c.length for c in caps}) > 2
    for cap in caps:
        bits = class_bits(cap.tokens)
        n, (layers, heads) = cap.length, cap.attention.shape[:2]
        enc = np.stack([encoder_rows(w, bits) for w in cap.attention])
        dec = np.stack([decoder_rows(w, bits, causal=False) for w in cap.attention])
        assert cap.row_head_stats.shape == (layers, heads, n, 10)
        assert cap.decoder_row_head_stats.shape == (layers, heads, n, 5)
        for got, want in ((cap.row_head_stats, enc), (cap.decoder_row_head_stats, dec)):
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
        # head_stats: the rows' means (prev's row 0 is 0: the sum over rows 1 .. n-1 / n)
        np.testing.assert_allclose(
            cap.head_stats, np.nanmean(cap.row_head_stats, axis=2), rtol=1e-5, atol=1e-6
        )


def test_query_positions_cut_the_maps_not_the_row_statistics(client, caps):
    picked = client.capture(TEXTS, what=WHAT, query_positions="-2:")
    for got, whole in zip(picked, caps, strict=True):
        assert got.attention.shape[2] == 2 and got.query_positions == (
            whole.length - 2,
            whole.length - 1,
        )
        for name in WHAT[1:]:
            np.testing.assert_array_equal(got.array(name), whole.array(name), err_msg=name)


def test_a_saved_capture_keeps_the_rows_and_their_nans(caps, tmp_path):
    from jaxattn.capture import Capture

    path = tmp_path / "rows.npz"
    caps[1].save(path)
    back = Capture.load(path)
    for name in WHAT:
        np.testing.assert_array_equal(back.array(name), caps[1].array(name), err_msg=name)
    assert np.isnan(back.decoder_row_head_stats[:, :, 0]).all()
