"""`convert` never overwrites by accident and never leaves a half-written OUT_DIR:
it refuses an output inside (or holding) the input, a file, or a non-empty
directory unless told to replace it, and writes beside OUT_DIR, renaming at the end.
"""

from __future__ import annotations

import re

import pytest

import jaxattn
from jaxattn.checkpoints import convert_checkpoint, native
from jaxattn.checkpoints.loading import read_checkpoint
from jaxattn.cli import main
from jaxattn.errors import CheckpointError, ModelNotFoundError, UsageError


def _named(*parts) -> str:
    return ".*".join(re.escape(str(p)) for p in parts)


def _listing(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize("where", ["same", "inside", "holding"])
def test_output_inside_or_holding_the_input_is_refused(bert_copy, where):
    out = {"same": bert_copy, "inside": bert_copy / "out", "holding": bert_copy.parent}[where]
    before = _listing(bert_copy)
    with pytest.raises(UsageError, match=_named(out, bert_copy)):
        convert_checkpoint(bert_copy, out, overwrite=True)
    assert _listing(bert_copy) == before  # the input is untouched


def test_existing_output_is_refused_unless_replaced(bert_copy, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(UsageError) as info:
        convert_checkpoint(bert_copy, out)
    assert str(info.value) == (
        f"output directory {out} exists and is not empty: choose another directory "
        "or replace it (--overwrite / overwrite=True)"
    )
    assert (out / "keep.txt").read_text() == "mine"
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(UsageError, match=_named(file, "is a file")):
        convert_checkpoint(bert_copy, file, overwrite=True)
    assert file.read_text() == "x"


def test_a_hub_name_is_no_directory_to_convert(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for name in ("bert-base-uncased", "org/name"):
        with pytest.raises(ModelNotFoundError) as info:
            convert_checkpoint(name, tmp_path / "out")
        assert str(info.value) == (
            f"no checkpoint directory {name}: convert reads a local directory, not a Hugging "
            f"Face Hub name; download the model first (hf download {name} --local-dir DIR) "
            "and convert DIR"
        )
        assert main(["convert", name, str(tmp_path / "out")]) == 2
        assert "download the model first" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    with pytest.raises(ModelNotFoundError, match=r"^model directory \S*nowhere does not exist"):
        convert_checkpoint("./nowhere", tmp_path / "out")  # a path: named missing, as before


def test_failed_convert_leaves_no_output(bert_copy, tmp_path):
    weights = bert_copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    parent = tmp_path / "outputs"
    parent.mkdir()
    with pytest.raises(CheckpointError, match=_named(weights)):
        convert_checkpoint(bert_copy, parent / "out")
    assert _listing(parent) == []  # neither OUT_DIR nor a temporary sibling


def test_failure_while_writing_keeps_the_old_output(bert_copy, tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")

    def save_then_fail(path, config, params, eos_ids=None):
        (path / "jaxattn.json").write_text("{}")  # half written
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(native, "save", save_then_fail)
    with pytest.raises(OSError, match="No space left"):
        convert_checkpoint(bert_copy, out, overwrite=True)
    assert _listing(tmp_path) == ["bert", "out"]
    assert _listing(out) == ["keep.txt"]


def test_cli_refuses_then_replaces_with_overwrite(bert_copy, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    assert main(["convert", str(bert_copy), str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxattn convert: error: output directory") and "--overwrite" in err
    assert main(["convert", str(bert_copy), str(out), "--overwrite"]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    assert "stale.txt" not in _listing(out) and "jaxattn.json" in _listing(out)
    assert _listing(tmp_path) == ["bert", "out"]  # no temporary directory left
    config, _ = read_checkpoint(out)
    assert config == read_checkpoint(bert_copy)[0]


def test_empty_output_directory_is_used(native_dir, tmp_path):
    """An empty OUT_DIR is not "existing output"; a jaxattn checkpoint converts too."""
    out = tmp_path / "empty"
    out.mkdir()
    convert_checkpoint(native_dir, out)
    assert jaxattn.load(out).info == jaxattn.load(native_dir).info


def test_out_of_memory_reading_is_named_as_load_names_it(bert_copy, tmp_path, monkeypatch, capsys):
    """A convert that runs out of host memory reading the weights says so, naming the
    checkpoint (as `jaxattn.load`), not the capture-time advice (--limit); no output."""
    from jaxattn.checkpoints import hf_files

    def full(*_, **__):
        raise MemoryError

    monkeypatch.setattr(hf_files, "read_state_dict", full)
    out = tmp_path / "out"
    assert main(["convert", str(bert_copy), str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert f"out of host memory loading {bert_copy}" in err and "--limit" not in err, err
    assert not out.exists() and not list(tmp_path.glob(".out.partial-*"))
