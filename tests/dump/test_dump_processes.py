"""`jaxattn dump` as users run it: 4 local devices, 2 jax.distributed processes, a killed job.

Each case runs the real command in subprocesses (fake CPU devices must be set
before jax starts; a kill must not take pytest with it) and compares the store
with the uninterrupted single-process reference dump of the same corpus.
"""

from __future__ import annotations

import subprocess

import pytest
from dump_helpers import assert_same_store, cli_env, dump_cli, free_port, run_cli

import jaxattn
from jaxattn.cli import main
from jaxattn.dump.job import CRASH_ENV
from jaxattn.dump.shard import CRASH_STATUS

pytestmark = pytest.mark.slow


def test_four_local_devices(corpus, bert_checkpoint, reference_store, compile_cache, tmp_path):
    proc = run_cli(
        dump_cli(corpus, tmp_path / "s", bert_checkpoint), cli_env(compile_cache, devices=4)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "8 examples in 2 shards (0 already done), 0 skipped" in proc.stderr
    store = jaxattn.open_store(tmp_path / "s")
    assert {part.stats["devices"] for part in store.parts.values()} == {4}
    # Batches of 4 rows over 4 devices vs 4 rows on one: float32 within 1e-6.
    assert_same_store(store, jaxattn.open_store(reference_store), exact=False)


def test_two_processes_write_one_store(
    corpus, bert_checkpoint, reference_store, compile_cache, tmp_path
):
    port = free_port()
    procs = [
        subprocess.Popen(
            dump_cli(
                corpus,
                tmp_path / "s",
                bert_checkpoint,
                "--coordinator",
                f"127.0.0.1:{port}",
                "--num-processes",
                "2",
                "--process-id",
                str(i),
            ),
            env=cli_env(compile_cache),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    logs = []
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        logs.append(err)
        assert proc.returncode == 0, err[-3000:]
    assert "dump p0/2: 4 examples in 1 shard " in logs[0]
    assert "dump p1/2: 4 examples in 1 shard " in logs[1]
    assert "complete, 2/2 shards, 8 examples of 8 records" in logs[0]
    store = jaxattn.open_store(tmp_path / "s")
    assert {k: part.stats["process"] for k, part in store.parts.items()} == {0: 0, 1: 1}
    records = [e.record for e in store.entries]
    assert records == sorted(set(records)) == list(range(8))  # complete, no duplicates
    assert_same_store(store, jaxattn.open_store(reference_store))


def test_killed_job_resumes_with_the_same_command(
    corpus, bert_checkpoint, reference_store, compile_cache, tmp_path, capsys
):
    cmd = dump_cli(corpus, tmp_path / "s", bert_checkpoint, "--chunk-bytes", "4096")
    killed = run_cli(cmd, cli_env(compile_cache, **{CRASH_ENV: "1"}))
    assert killed.returncode == CRASH_STATUS, killed.stderr[-3000:]
    with pytest.raises(jaxattn.CaptureFileError, match="incomplete: 1 of 2 shards"):
        jaxattn.open_store(tmp_path / "s")
    assert (tmp_path / "s" / "attention" / "s000001").exists()  # the half-written shard

    # Another command against the half-done store is refused, before any work.
    refused = main([*cmd[1:], "--what", "attention"])
    assert refused == 2
    assert "written by a different command: quantities (--what)" in capsys.readouterr().err

    resumed = run_cli(cmd, cli_env(compile_cache))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "4 examples in 2 shards (1 already done)" in resumed.stderr
    assert_same_store(jaxattn.open_store(tmp_path / "s"), jaxattn.open_store(reference_store))
