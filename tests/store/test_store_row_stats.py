"""The per-row head statistics ([L, H, T, N], [L, H, T, P]: a token axis beside a fixed
statistics axis, NaN where a row has no value) through the store and back, as written."""

from __future__ import annotations

import dataclasses

import numpy as np
import store_helpers
from store_helpers import captures, write_store

import jaxattn
from jaxattn.spec import CaptureSpec
from jaxattn.store import layout

WHAT = ("row_head_stats", "decoder_row_head_stats", "head_stats")


def test_row_statistics_round_trip_with_their_nans(tmp_path, monkeypatch):
    spec = CaptureSpec(what=WHAT, layers=(0, 1, 2), heads=(0, 1, 2))
    monkeypatch.setattr(store_helpers, "SPEC", spec)
    rng = np.random.default_rng(7)
    caps = []
    for cap in captures(3):
        tensors = {
            q: rng.random(layout.example_shape(q, store_helpers.SIZES, cap.length)).astype(
                np.float32
            )
            for q in WHAT
        }
        tensors["decoder_row_head_stats"][:, :, 0] = np.nan  # row 0 has none
        tensors["row_head_stats"][:, :, 1:, 7] = np.nan  # entropy_cls: the [CLS] row only
        caps.append(dataclasses.replace(cap, tensors=tensors))
    path = tmp_path / "rows.zarr"
    write_store(path, caps, shard_size=2)
    store = jaxattn.open_store(path)
    assert len(store) == 3
    for got, want in zip(store, caps, strict=True):
        assert got.row_head_stats.shape == (3, 3, want.length, 10)
        for q in WHAT:
            np.testing.assert_array_equal(got.tensors[q], want.tensors[q], err_msg=q)
