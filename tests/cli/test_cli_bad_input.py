"""Every command against every bad input of the table: the right exit code, one line
naming the problem, no traceback (the table: tests/cli/bad_inputs.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from bad_inputs import argv, cases

from jaxattn.cli import main

CASES = cases()


@pytest.fixture
def good(bert_checkpoint, tmp_path_factory) -> dict:
    """Good values for every slot: the tiny BERT, a small input file, fresh outputs."""
    tmp = tmp_path_factory.mktemp("good")
    (tmp / "input.txt").write_text("a short sentence\nanother one\n")
    return {
        "model": bert_checkpoint,
        "text": "a short sentence",
        "input": str(tmp / "input.txt"),
        "input_file": str(tmp / "input.txt"),
        "out": str(tmp / "fresh.html"),  # a name every command writes (view: an HTML page)
        "store": str(tmp / "fresh-store"),
        "out_dir": str(tmp / "fresh-dir"),
        "server": "127.0.0.1:9",  # nothing listens on the discard port
        "cache_action": "dir",  # the one that reads no cache (rows fail before it runs)
    }


def test_the_table_reaches_every_command_and_kind():
    commands = {c for c, _ in CASES}
    assert commands == {
        "capture",
        "view",
        "analyze",
        "dump",
        "bench",
        "convert",
        "demo",
        "serve",
        "web",
        "loadtest",
        "cache",
    }
    assert len(CASES) >= 80


@pytest.mark.parametrize("command, bad", CASES, ids=[f"{c}: {b.name}" for c, b in CASES])
def test_bad_input_gets_one_line_and_the_exit_code(command, bad, good, tmp_path, capsys):
    args = argv(command, bad, tmp_path, good)
    code = main(args)
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert "Traceback" not in out + err
    assert len(errors) == 1, err
    assert errors[0].startswith(f"jaxattn {command}: error: "), errors[0]
    assert re.search(bad.message, errors[0]), errors[0]
    assert code == bad.code, errors[0]
    if bad.name == "output exists":  # refused, not overwritten
        assert (
            Path(args[args.index("--out" if "--out" in args else "--json") + 1]).read_text()
            == "keep me"
        )


def test_the_real_entry_point_answers_non_utf8_bytes_without_a_traceback(tmp_path):
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    for args, code, message in [
        ([b"capture", b"\xff\xfe"], 1, b"undecodable byte 0xff"),
        ([b"capture", b"hi", b"--layers", b"0,,x"], 2, b"'x'"),
        ([b"view", b"gone.npz", b"--out", str(tmp_path / "v.html").encode()], 2, b"gone.npz"),
    ]:
        r = subprocess.run(
            [sys.executable.encode(), b"-m", b"jaxattn", *args],
            capture_output=True,
            env=env,
            timeout=120,
        )
        assert r.returncode == code, r.stderr
        assert b"Traceback" not in r.stderr and message in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_an_unexpected_error_is_one_line_with_the_way_to_the_traceback(monkeypatch, capsys):
    import jaxattn.cli.capture_cmd as capture_cmd

    def boom(args):
        raise RuntimeError("something no one foresaw")

    monkeypatch.setattr(capture_cmd, "_run", boom)
    monkeypatch.delenv("JAXATTN_TRACEBACK", raising=False)
    assert main(["capture", "hi"]) == 1
    err = capsys.readouterr().err
    assert "internal error (RuntimeError: something no one foresaw)" in err
    assert "JAXATTN_TRACEBACK=1" in err and "Traceback" not in err
    monkeypatch.setenv("JAXATTN_TRACEBACK", "1")
    with pytest.raises(RuntimeError):
        main(["capture", "hi"])


def test_ctrl_c_says_interrupted_and_exits_130(bert_checkpoint):
    """The real entry point: one "interrupted" line, exit 130, however busy the process."""
    import signal

    proc = subprocess.Popen(
        [sys.executable, "-m", "jaxattn", "web", "--model", str(bert_checkpoint), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().startswith("jaxattn web: http://")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "jaxattn web: error: interrupted", err
    assert "Traceback" not in err and "Fatal Python error" not in err


def test_ctrl_c_removes_the_copy_of_standard_input(tmp_path):
    """os._exit runs no atexit handler: the interrupt's exit removes the spooled stdin."""
    code = (
        "from jaxattn.cli.corpus import input_path\n"
        "from jaxattn.cli import _Interrupt\n"
        "assert input_path('-').read_text() == 'a text\\n'\n"
        "_Interrupt.exit()\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        input="a text\n",
        text=True,
        capture_output=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        timeout=120,
    )
    assert r.returncode == 130, r.stderr
    assert os.listdir(tmp_path) == []


def test_an_interrupted_dump_says_the_same_command_resumes(tmp_path, monkeypatch, capsys):
    """A researcher who stops an hour-long dump learns the store is not lost."""
    import jaxattn
    import jaxattn.dump.job

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(jaxattn, "load", lambda *a, **k: None)
    monkeypatch.setattr(jaxattn.dump.job, "run_dump", ctrl_c)
    corpus = tmp_path / "c.txt"
    corpus.write_text("a text\n")
    assert main(["dump", str(corpus), "--out", str(tmp_path / "s.zarr"), "--quiet"]) == 130
    assert capsys.readouterr().err.strip() == (
        "jaxattn dump: error: interrupted (the finished shards are kept: run the same "
        "command again to resume)"
    )
