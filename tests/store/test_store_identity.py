"""What `jaxattn dump` may write into (`check_output`) and which stores it may resume
(`differences`): the weights fingerprint, the record limit, stores of older versions."""

from __future__ import annotations

import copy
import json

import pytest
from store_helpers import captures, write_store

from jaxattn.errors import UsageError
from jaxattn.store import metadata as store_metadata
from jaxattn.store.kvstore import KeyValue, root_spec
from jaxattn.store.location import check_output


def test_check_output_accepts_new_empty_and_store_locations(tmp_path):
    check_output(tmp_path / "new")
    (tmp_path / "empty").mkdir()
    check_output(tmp_path / "empty")
    write_store(tmp_path / "store", captures(2))
    check_output(tmp_path / "store")
    # Another process of the same dump creating the store: group nodes, no root zarr.json yet.
    for name in ("attention", "manifest"):
        (tmp_path / "starting" / name).mkdir(parents=True)
    check_output(tmp_path / "starting")


def test_check_output_refuses_files_and_other_data(tmp_path):
    (tmp_path / "f.zarr").write_text("x")
    with pytest.raises(
        UsageError,
        match=r"^--out .*f\.zarr is an existing file; a store is a "
        r"directory: choose another --out$",
    ):
        check_output(tmp_path / "f.zarr")
    data = tmp_path / "thesis"
    (data / "attention").mkdir(parents=True)
    (data / "chapter1.tex").write_text("precious")
    with pytest.raises(
        UsageError,
        match=r"thesis is a non-empty directory that is not a jaxattn "
        r"store \(it holds chapter1\.tex\); it may be someone's data",
    ):
        check_output(data)
    zarr = tmp_path / "other.zarr"
    zarr.mkdir()
    (zarr / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group"}))
    with pytest.raises(UsageError, match="not a jaxattn store.*choose another --out"):
        check_output(zarr)
    assert (data / "chapter1.tex").read_text() == "precious"


@pytest.fixture
def meta(tmp_path):
    """The metadata of a store as this jaxattn writes it."""
    write_store(tmp_path / "s", captures(2))
    return store_metadata.read(KeyValue(root_spec(tmp_path / "s")))


def test_other_weights_are_refused_a_store_without_weights_is_resumed(meta):
    other = copy.deepcopy(meta)
    other["model"]["weights"] = "blake2b:ffff"
    assert store_metadata.differences(meta, other) == [
        "model weights (fingerprint): the store has 'blake2b:0123456789abcdef', this command "
        "gives 'blake2b:ffff'"
    ]
    old = copy.deepcopy(meta)
    del old["model"]["weights"], old["input"]["limit"]  # as jaxattn 0.2 wrote it
    assert store_metadata.differences(old, meta) == []


def test_a_changed_limit_is_refused(meta):
    other = copy.deepcopy(meta)
    other["input"]["limit"] = 3
    assert store_metadata.differences(meta, other) == [
        "record limit (--limit): the store has None, this command gives 3"
    ]


def test_store_mismatch_is_a_usage_error_naming_field_values_and_advice(tmp_path, meta):
    other = copy.deepcopy(meta)
    other["spec"]["dtype"] = "float16"
    with pytest.raises(UsageError) as err:
        store_metadata.create_or_check(KeyValue(root_spec(tmp_path / "s")), other)
    assert type(err.value).__name__ == "StoreMismatch"
    assert "dtype (--dtype): the store has 'float32', this command gives 'float16'" in str(
        err.value
    )
    assert "choose another --out (or --overwrite to delete the store and start it afresh)" in (
        str(err.value)
    )


def test_an_encoders_decoder_statistics_record_their_entropy_and_older_stores_are_refused():
    """decoder_head_stats' entropy of an encoder's row became the whole row's (every real
    key; it summed the keys up to the row): a store of it records so, and one written
    before (which records nothing) is not continued with the new definition, naming it.
    A decoder's, and stores without decoder statistics, record nothing, as before."""
    import dataclasses

    from store_helpers import CONFIG, INFO

    from jaxattn.spec import CaptureSpec
    from jaxattn.store.metadata import InputInfo

    info = InputInfo(name="in.txt", format="text", sha256="0" * 64, size=1, records=2, reader="r")

    def meta_of(what, causal):
        return store_metadata.build(
            model_info=dataclasses.asdict(INFO) | {"causal": causal},
            model_fingerprint="sha256:test",
            spec=CaptureSpec(what=what, layers=(0,), heads=(0,)),
            model_config=CONFIG.to_dict(),
            input_info=info,
            shard_size=2,
            too_long="error",
        )

    for what in (("decoder_head_stats",), ("attention", "decoder_norm_row_head_stats")):
        new = meta_of(what, causal=False)
        assert new["spec"]["entropy"] == "every real key"
        old = copy.deepcopy(new)
        del old["spec"]["entropy"]  # as a store of the earlier definition
        (line,) = store_metadata.differences(old, new)
        assert line.startswith("an encoder's decoder statistics' entropy") and "None" in line
        assert "entropy" not in meta_of(what, causal=True)["spec"]  # a decoder's: unchanged
    assert "entropy" not in meta_of(("attention", "head_stats"), causal=False)["spec"]
