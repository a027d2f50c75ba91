"""`jaxattn dump --overwrite`: the store at --out deleted and started over, saying so; a
path that is not a jaxattn store is refused as without it; one process only."""

from __future__ import annotations

import io

import pytest
from dump_helpers import options

import jaxattn
from jaxattn.cli import main
from jaxattn.dump import run_dump
from jaxattn.dump.distributed import Process
from jaxattn.errors import UsageError


def test_overwrite_starts_a_finished_store_over_with_the_new_command(
    engines, bert_checkpoint, corpus, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "s"
    run_dump(engines["bert"], options(corpus, out, what=("attention",)), model_dir=bert_checkpoint)
    (out / "attention" / "left-by-the-old-store").write_text("x")  # deleted with the store
    monkeypatch.setattr(jaxattn, "load", lambda *a, **k: engines["bert"])
    argv = ["dump", str(corpus), "--model", str(bert_checkpoint), "--out", str(out)]
    argv += ["--shard-size", "4", "--what", "attention,fx_norm", "--quiet"]
    assert main(argv) == 2  # another command, without --overwrite: refused
    assert "--overwrite to delete the store" in capsys.readouterr().err
    assert main([*argv, "--overwrite"]) == 0
    err = capsys.readouterr().err
    assert f"dump: started the store at {out} over (--overwrite)" in err
    assert "8 examples in 2 shards (0 already done)" in err
    store = jaxattn.open_store(out)
    assert store.what == ("attention", "fx_norm") and len(store) == 8
    assert not (out / "attention" / "left-by-the-old-store").exists()
    assert main([*argv, "--overwrite"]) == 0  # the same command too: redone, not resumed
    assert "8 examples in 2 shards (0 already done)" in capsys.readouterr().err


def test_overwrite_refuses_what_is_not_a_jaxattn_store(corpus, tmp_path, capsys):
    """Before a model loads: someone's data or a file stays as it was."""
    (tmp_path / "f").write_text("x")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "notes.txt").write_text("mine")
    for name, what in (("f", "is an existing file"), ("data", "may be someone's data")):
        assert main(["dump", str(corpus), "--out", str(tmp_path / name), "--overwrite"]) == 2
        err = capsys.readouterr().err
        assert what in err and err.rstrip().endswith(
            "(--overwrite replaces a jaxattn store only)"
        ), err
    assert (tmp_path / "f").read_text() == "x"
    assert (tmp_path / "data" / "notes.txt").read_text() == "mine"


def test_overwrite_in_a_job_of_several_processes_is_refused(
    engines, bert_checkpoint, corpus, tmp_path
):
    with pytest.raises(UsageError, match="--overwrite in a job of 2 processes: each would"):
        run_dump(
            engines["bert"],
            options(corpus, tmp_path / "s", overwrite=True),
            model_dir=bert_checkpoint,
            process=Process(index=1, count=2),
            stream=io.StringIO(),
        )
    assert not (tmp_path / "s").exists()
