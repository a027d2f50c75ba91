"""A dump store records the Hub revision of its model's weights (metadata model.revision),
and captures read back from it carry it in their provenance."""

from __future__ import annotations

import dataclasses
import json

from store_helpers import INFO, captures, write_store  # noqa: E402

import jaxattn

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_a_store_records_the_revision_its_captures_report(tmp_path, monkeypatch):
    import store_helpers

    monkeypatch.setattr(store_helpers, "INFO", dataclasses.replace(INFO, revision=COMMIT))
    path = tmp_path / "s.zarr"
    meta = write_store(path, captures(2))
    assert meta["model"]["revision"] == COMMIT
    root = json.loads((path / "zarr.json").read_text())
    assert root["attributes"]["jaxattn"]["model"]["revision"] == COMMIT
    store = jaxattn.open_store(path)
    assert store[0].provenance["revision"] == COMMIT and store[1].provenance["revision"] == COMMIT
