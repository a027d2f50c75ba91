"""A location that holds no readable store is a CaptureFileError saying what is there;
TensorStore's own failures come back as one line naming the store and the operation."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
from store_helpers import captures, write_store

import jaxattn
from jaxattn.errors import CaptureFileError
from jaxattn.store.kvstore import tensorstore_detail


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A finished store of 4 examples in 2 shards (copied before damaging it)."""
    path = tmp_path_factory.mktemp("good") / "s.zarr"
    write_store(path, captures(4))
    return path


def _error(location, **kw) -> str:
    with pytest.raises(CaptureFileError) as err:
        store = jaxattn.open_store(location, **kw)
        store[0]
    text = str(err.value)
    assert "\n" not in text and str(location) in text
    return text


def test_what_is_there_when_there_is_no_store(tmp_path):
    advice = "(write one with jaxattn dump INPUT --out STORE)"
    assert _error(tmp_path / "none").endswith(f"found nothing: no such file or directory {advice}")
    (tmp_path / "f.txt").write_text("hello")
    assert "found a file, not a directory" in _error(tmp_path / "f.txt")
    (tmp_path / "empty").mkdir()
    assert "is not a jaxattn store: found an empty directory" in _error(tmp_path / "empty")
    for name in ("a.txt", "b", "c", "d"):
        (tmp_path / "data" / name).mkdir(parents=True)
    assert "found a directory of 4 entries (a.txt, b, c, ...) without a zarr.json" in _error(
        tmp_path / "data"
    )


def _damage(good, tmp_path, edit) -> str:
    path = tmp_path / "s.zarr"
    shutil.copytree(good, path)
    edit(path)
    return _error(path)


def _edit_metadata(change):
    def edit(path):
        doc = json.loads((path / "zarr.json").read_text())
        change(doc["attributes"])
        (path / "zarr.json").write_text(json.dumps(doc))

    return edit


def test_damaged_or_foreign_metadata(good, tmp_path):
    def garble(path):
        (path / "zarr.json").write_text('{"zarr_format": 3, "node_')

    assert "zarr.json is not valid JSON" in _damage(good, tmp_path / "1", garble)
    foreign = _edit_metadata(lambda a: a.pop("jaxattn"))
    assert "not a jaxattn store: its zarr.json is a zarr node without jaxattn store metadata" in (
        _damage(good, tmp_path / "2", foreign)
    )
    no_shards = _edit_metadata(lambda a: a["jaxattn"].pop("shards"))
    assert "is damaged: its metadata (zarr.json, attributes.jaxattn) lacks shards.count" in (
        _damage(good, tmp_path / "3", no_shards)
    )
    newer = _edit_metadata(lambda a: a["jaxattn"].update(format_version=3))
    text = _damage(good, tmp_path / "4", newer)
    assert "has format version 3, newer than this jaxattn" in text
    assert text.endswith("reads (1, 2): upgrade jaxattn to read it")


def test_an_incomplete_store_on_the_command_line_is_advised_in_its_terms(tmp_path, capsys):
    """Not "open it with partial=True": no command takes that."""
    from jaxattn.cli import main

    path = tmp_path / "s.zarr"
    write_store(path, captures(4), commit=1)
    for argv in (
        ["view", str(path), "--out", str(tmp_path / "x.html")],
        ["analyze", str(path), "--out", str(tmp_path / "a.json")],
    ):
        assert main(argv) == 1
        assert capsys.readouterr().err.strip() == (
            f"jaxattn {argv[0]}: error: the store at {path} is incomplete: 1 of 2 shards are "
            "done; rerun the jaxattn dump command that wrote it to finish it (the same "
            "command resumes where it stopped)"
        )


def test_incomplete_and_damaged_manifest(good, tmp_path):
    path = tmp_path / "s.zarr"
    write_store(path, captures(4), commit=1)
    assert _error(path).endswith(
        "is incomplete: 1 of 2 shards are done; rerun the jaxattn dump command that wrote "
        "it to finish it (or open it with partial=True)"
    )
    assert len(jaxattn.open_store(path, partial=True)) == 2

    def garble_part(p):
        (p / "manifest" / "s000001" / "zarr.json").write_text('{"attributes": {}}')

    assert "manifest/s000001/zarr.json is not a manifest part" in (
        _damage(good, tmp_path / "m", garble_part)
    )

    def not_json(p):
        (p / "manifest" / "s000001" / "zarr.json").write_text("{bad")

    text = _damage(good, tmp_path / "j", not_json)  # the way out too, not only the damage
    assert "manifest/s000001/zarr.json is not valid JSON" in text
    assert text.endswith("delete it and rerun the dump command to redo shard 1")


def test_tensorstore_failures_are_one_line_naming_store_and_operation(good, tmp_path):
    def garble_chunk(path):
        (path / "attention" / "s000000" / "c" / "0").write_bytes(b"garbage")

    text = _damage(good, tmp_path / "1", garble_chunk)
    assert text.startswith(f"cannot read attention of shard 0 in the store at {tmp_path / '1'}")
    assert "Error reading local file" in text and "[" not in text
    assert text.endswith(
        "delete manifest/s000000/zarr.json and rerun the dump command to redo the shard"
    )

    def drop_array(path):
        (path / "hidden_states" / "s000000" / "zarr.json").unlink()

    text = _damage(good, tmp_path / "2", drop_array)
    assert "cannot read hidden_states of shard 0" in text and "NOT_FOUND" in text
    assert "tensorstore_spec" not in text


def test_a_full_disk_at_a_shard_commit_says_the_same_command_resumes(tmp_path):
    """ENOSPC as the manifest part is written: one line naming the store, the key and
    the cause, advising the rerun; the shard stays uncommitted (redone on resume)."""
    import errno

    from jaxattn.store.kvstore import KeyValue, root_spec
    from jaxattn.store.writer import ShardWriter

    caps = captures(4)
    meta = write_store(tmp_path / "s", caps, commit=1)
    kv = KeyValue(root_spec(tmp_path / "s"))

    class Full:  # the kvstore, its writes failing as on a full disk
        def __init__(self, kv):
            self.kv = kv

        def write(self, key, value):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.kv, name)

    kv._kv = Full(kv._kv)
    writer = ShardWriter(kv, meta, 1, [caps[2].length, caps[3].length])
    for r in (2, 3):
        writer.add(caps[r], record=r, line=r + 1, id=str(r), truncated=False)
    with pytest.raises(CaptureFileError) as err:
        writer.commit((2, 4), (), {})
    assert str(err.value) == (
        f"cannot write manifest/s000001/zarr.json in the store at {tmp_path / 's'}: "
        "[Errno 28] No space left on device; fix the cause, then rerun the same command: "
        "it resumes at this shard"
    )
    partial = jaxattn.open_store(tmp_path / "s", partial=True)
    assert sorted(partial.parts) == [0] and [e.record for e in partial.entries] == [0, 1]


def test_tensorstore_detail_is_one_short_line():
    raw = ValueError(
        'NOT_FOUND: Error opening "zarr3" driver: Metadata at local file "/x/zarr.json" does '
        'not exist [tensorstore_spec=\'{"driver": "zarr3"}\']\nmore\nlines'
    )
    assert tensorstore_detail(raw) == (
        'NOT_FOUND: Error opening "zarr3" driver: Metadata at local file "/x/zarr.json" does '
        "not exist"
    )
    long = tensorstore_detail(ValueError("FAILED_PRECONDITION: " + "x" * 1000))
    assert len(long) == 240 and long.endswith("...")


def test_a_missing_chunk_file_is_damage_not_zeros(good, tmp_path):
    """Absent chunks would read as the fill value: the writer stores every chunk, and
    the reader counts them."""

    def drop_chunk(path):
        (path / "attention" / "s000000" / "c" / "0").unlink()

    text = _damage(good, tmp_path / "1", drop_chunk)
    assert "is damaged: 1 chunk file(s) of attention of shard 0 are missing" in text
    assert text.endswith(
        "delete manifest/s000000/zarr.json and rerun the dump command to redo the shard"
    )


def test_all_zero_data_is_stored_and_read_back(tmp_path):
    caps = captures(2)
    zero = {q: np.zeros_like(x) for q, x in caps[0].tensors.items()}
    caps[0] = dataclasses.replace(caps[0], tensors=zero)
    write_store(tmp_path / "z.zarr", caps, shard_size=1)  # shard 0: zeros only
    assert (tmp_path / "z.zarr" / "attention" / "s000000" / "c" / "0").exists()
    store = jaxattn.open_store(tmp_path / "z.zarr")
    assert not store[0].attention.any()
    np.testing.assert_array_equal(store[1].hidden_states, caps[1].hidden_states)


def test_a_changed_command_on_a_store_with_no_finished_shard_says_delete_it(tmp_path):
    import copy

    from jaxattn.store import metadata as store_metadata
    from jaxattn.store.kvstore import KeyValue, root_spec

    meta = write_store(tmp_path / "s.zarr", captures(4), commit=0)
    other = copy.deepcopy(meta)
    other["spec"]["dtype"] = "float16"
    kv = KeyValue(root_spec(tmp_path / "s.zarr"))
    with pytest.raises(store_metadata.StoreMismatch, match="no finished shard yet: delete it"):
        store_metadata.create_or_check(kv, other)
    write_store(tmp_path / "t.zarr", captures(4), commit=1)
    with pytest.raises(store_metadata.StoreMismatch, match="Rerun the original command"):
        store_metadata.create_or_check(KeyValue(root_spec(tmp_path / "t.zarr")), other)


def test_an_example_whose_shapes_disagree_with_the_spec_is_damage(good, tmp_path):
    """The metadata names fewer heads than the stored tensors hold: refused when read,
    naming the example and the tensor, not an IndexError in an analysis later."""
    spec = json.loads((good / "zarr.json").read_text())["attributes"]["jaxattn"]["spec"]
    assert len(spec["heads"]) > 1  # the test's premise
    fewer = _edit_metadata(lambda a: a["jaxattn"]["spec"].update(heads=spec["heads"][:1]))
    text = _damage(good, tmp_path, fewer)
    assert "is damaged: example 0: tensor " in text and "expected" in text, text
