"""Rerunning `jaxattn dump` on a store the same command finished answers before any
model loads: the summary of a job with every shard already done, as the loaded
model's run says it. A store with shards to do, or another command's, still loads
the model (to resume it, or to refuse it naming the difference)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from dump_helpers import options

import jaxattn
from jaxattn.cli import main
from jaxattn.dump import run_dump
from jaxattn.dump.job import finished_dump


def _no_model(*args, **kwargs):
    raise AssertionError("the model was loaded")


def _said(err: str) -> str:
    """The summary line, its timing (seconds, rate) left out."""
    (line,) = [x for x in err.splitlines() if x.startswith("dump: ")]
    return re.sub(r", [\d.]+s \([\d.]+ ex/s\)$", "", line)


@pytest.fixture
def argv(corpus, bert_checkpoint, tmp_path) -> list[str]:
    out = tmp_path / "s"
    return ["dump", str(corpus), "--model", str(bert_checkpoint), "--out", str(out)] + [
        "--shard-size",
        "4",
        "--what",
        "attention",
        "--quiet",
    ]


def test_a_finished_store_is_answered_without_loading_the_model(engines, argv, monkeypatch, capsys):
    engine = engines["bert"]  # loaded before jaxattn.load is patched (engines loads lazily)
    monkeypatch.setattr(jaxattn, "load", lambda *a, **k: engine)
    assert main(argv) == 0
    assert "8 examples in 2 shards (0 already done)" in capsys.readouterr().err
    assert main(argv) == 0  # the loaded model's answer on the finished store
    loaded = _said(capsys.readouterr().err)
    assert loaded.startswith("dump: 0 examples in 2 shards (2 already done), 0 skipped, ")
    monkeypatch.setattr(jaxattn, "load", _no_model)
    assert main(argv) == 0
    assert _said(capsys.readouterr().err) == loaded


def test_a_store_with_a_shard_to_do_or_of_another_command_loads_the_model(
    engines, argv, tmp_path, monkeypatch, capsys
):
    loads, engine = [], engines["bert"]
    monkeypatch.setattr(jaxattn, "load", lambda *a, **k: loads.append(a) or engine)
    assert main(argv) == 0 and len(loads) == 1
    assert main([*argv, "--what", "attention,fx_norm"]) == 2  # another --what (the last)
    assert "quantities (--what)" in capsys.readouterr().err and len(loads) == 2
    assert main([*argv, "--layers", "0"]) == 2  # another --layers
    assert "layers (--layers)" in capsys.readouterr().err and len(loads) == 3
    other = tmp_path / "other"  # another checkpoint: the same files and one more
    shutil.copytree(argv[3], other)
    (other / "NOTES.md").write_text("fine-tuned\n")
    assert main([*argv[:3], str(other), *argv[4:]]) == 2
    assert "model (checkpoint fingerprint)" in capsys.readouterr().err and len(loads) == 4
    shutil.rmtree(tmp_path / "s" / "manifest" / "s000001")  # a shard to do: resumed
    assert main(argv) == 0 and len(loads) == 5
    assert "4 examples in 2 shards (1 already done)" in capsys.readouterr().err
    assert main([*argv, "--overwrite"]) == 0 and len(loads) == 6  # started over
    capsys.readouterr()


def test_a_finished_store_of_a_renamed_checkpoint_is_refused_as_its_resume_is(
    argv, tmp_path, monkeypatch, capsys
):
    """The same files in a directory of another name: the model's name (the directory's,
    its config.json naming none) is another, which the store records and a resume refuses;
    a finished store is refused alike, by the loaded model's run (not answered finished)."""
    loads, load = [], jaxattn.load
    monkeypatch.setattr(jaxattn, "load", lambda *a, **k: loads.append(a) or load(*a, **k))
    assert main(argv) == 0 and len(loads) == 1
    renamed = tmp_path / "renamed"
    shutil.copytree(argv[3], renamed)
    again = [*argv[:3], str(renamed), *argv[4:]]
    assert main(again) == 2 and len(loads) == 2
    said = f"model name: the store has {Path(argv[3]).name!r}, this command gives 'renamed'"
    assert said in capsys.readouterr().err
    shutil.rmtree(tmp_path / "s" / "manifest" / "s000001")  # its resume: refused the same
    assert main(again) == 2 and len(loads) == 3
    assert said in capsys.readouterr().err


def test_the_library_answers_a_finished_store(engines, bert_checkpoint, corpus, tmp_path):
    opts = options(corpus, tmp_path / "s")
    assert finished_dump(opts, model_dir=bert_checkpoint) is None  # no store yet
    run_dump(engines["bert"], opts, model_dir=bert_checkpoint)
    result = finished_dump(opts, model_dir=bert_checkpoint)
    assert (result.shards, result.resumed, result.counts.examples) == (2, 2, 0)


def test_every_process_leaves_the_job_whatever_the_answer(
    engines, argv, tmp_path, monkeypatch, capsys
):
    """`distributed.shutdown` (the job's closing barrier) runs once on every path: a
    finished store answered without the model, a run, and a command refused before
    the model loads (a process that left without it kept the others waiting)."""
    from jaxattn.dump import distributed

    left, engine = [], engines["bert"]  # loaded before jaxattn.load is patched
    monkeypatch.setattr(distributed, "initialize", lambda *a, **k: distributed.Process())
    monkeypatch.setattr(distributed, "shutdown", left.append)
    monkeypatch.setattr(jaxattn, "load", lambda *a, **k: engine)
    assert main(argv) == 0 and len(left) == 1  # run
    assert main(argv) == 0 and len(left) == 2  # finished: answered without the model
    assert main([*argv, "--chunk-bytes", "1000"]) == 2  # refused by the options' check
    assert "--chunk-bytes 1000 is too small" in capsys.readouterr().err and len(left) == 3
    assert main([*argv, "--layers", "7"]) == 2  # refused by the finished store's spec
    assert "layers" in capsys.readouterr().err and len(left) == 4
    not_a_model = tmp_path / "weights.bin"  # refused where the checkpoint is resolved
    not_a_model.write_bytes(b"")
    assert main([*argv[:3], str(not_a_model), *argv[4:]]) != 0
    assert "weights.bin" in capsys.readouterr().err and len(left) == 5
