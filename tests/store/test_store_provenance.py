"""Captures read from a store say where they came from: the model the store records,
the source "store <path>", their text and whether it was truncated."""

from __future__ import annotations

import json

import pytest
from store_helpers import CONFIG, INFO, captures, write_store

import jaxattn
from jaxattn.info import jaxattn_version


def test_captures_carry_the_store_models_provenance(tmp_path):
    path = tmp_path / "s.zarr"
    written = captures(4)
    write_store(path, written, truncated=frozenset({1}))
    store = jaxattn.open_store(path)
    want = {
        "model": INFO.name,
        "family": INFO.family,
        "causal": False,  # an encoder
        "num_key_value_heads": INFO.num_key_value_heads,
        "weights": "blake2b:0123456789abcdef",
        "revision": "",  # a local directory's model has none
        "config": CONFIG.to_dict(),
        "jaxattn": jaxattn_version(),  # the version that wrote the store
        "source": f"store {path}",
    }
    for i, cap in enumerate(store):
        assert dict(cap.provenance) == want
        assert cap.truncated == (i == 1)
        assert cap.text == written[i].text  # a string, or an (A, B) pair
    assert isinstance(store[2].text, tuple)
    assert store[0].provenance is store[3].provenance  # one read-only mapping per store
    with pytest.raises(TypeError):
        store[0].provenance["model"] = "other"


def test_a_store_of_an_older_jaxattn_has_no_weights_or_config(tmp_path):
    path = tmp_path / "s.zarr"
    write_store(path, captures(2))
    root = json.loads((path / "zarr.json").read_text())
    root["attributes"]["jaxattn"]["jaxattn_version"] = "0.1.0"
    model = root["attributes"]["jaxattn"]["model"]
    del model["weights"], model["config"], model["precision"], model["revision"]  # as 0.2 did
    (path / "zarr.json").write_text(json.dumps(root))
    part_path = path / "manifest" / "s000000" / "zarr.json"
    part = json.loads(part_path.read_text())
    for entry in part["attributes"]["jaxattn_manifest"]["examples"]:
        del entry["text"]  # nor texts in the manifest
    part_path.write_text(json.dumps(part))
    cap = jaxattn.open_store(path)[1]
    assert cap.provenance["weights"] == "" and cap.provenance["config"] == {}
    assert cap.provenance["revision"] == ""  # nor the revision (jaxattn 0.3)
    assert cap.provenance["model"] == INFO.name and cap.provenance["family"] == "bert"
    assert cap.provenance["jaxattn"] == "0.1.0" and cap.provenance["source"] == f"store {path}"
    assert cap.text is None
