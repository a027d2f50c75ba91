"""The store in one process: what the engine captures, exactly once, read back every way."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from dump_helpers import (
    CORPUS,
    SHARD_SIZE,
    WHAT,
    assert_same_capture,
    assert_same_store,
    options,
    texts_of,
    write_jsonl,
)

import jaxattn
from jaxattn.dump import run_dump
from jaxattn.dump.distributed import Process
from jaxattn.dump.fingerprint import checkpoint_fingerprint
from jaxattn.store.metadata import StoreMismatch

ROOT = Path(__file__).resolve().parents[2]


def _shard_texts(k: int) -> list:
    return texts_of(CORPUS[k * SHARD_SIZE : (k + 1) * SHARD_SIZE])


def test_store_holds_what_the_engine_captures(engines, reference_store):
    store = jaxattn.open_store(reference_store)
    assert len(store) == len(CORPUS) and store.complete
    # Per shard, the dump and Engine.capture batch the same examples: bit-equal.
    for k in range(2):
        want = engines["bert"].capture(_shard_texts(k), what=WHAT)
        for j, ref in enumerate(want):
            assert_same_capture(store[k * SHARD_SIZE + j], ref)
    assert [cap.tokens for cap in store] == [store[i].tokens for i in range(len(store))]
    assert store[-1].tokens == store[len(store) - 1].tokens
    with pytest.raises(IndexError):
        store[len(store)]


def test_manifest_and_metadata(reference_store, bert_checkpoint, corpus, engines):
    store = jaxattn.open_store(reference_store)
    ids = [e.id for e in store.entries]
    assert ids == ["a1", "a2", "pair", "7", "4", "5", "b3", "b4"]
    assert [e.record for e in store.entries] == list(range(8))
    assert [e.line for e in store.entries] == list(range(1, 9))
    pair = store.entries[2]
    assert pair.tokens[pair.sentence_b_start - 1] == "[SEP]" and pair.length == len(pair.tokens)
    assert store[2].sentence_b_start == pair.sentence_b_start
    meta = store.metadata
    assert meta["model"]["fingerprint"] == checkpoint_fingerprint(bert_checkpoint)
    assert meta["model"]["name"] == engines["bert"].info.name
    assert meta["spec"] == {
        "what": list(WHAT),
        "layers": [0, 1, 2],
        "heads": [0, 1, 2],
        "dtype": "float32",
        "precision": "highest",
    }
    assert meta["input"]["records"] == 8 and meta["input"]["format"] == "jsonl"
    assert meta["shards"] == {"size": 4, "count": 2}
    assert re.fullmatch(r"[0-9a-f]{64}", meta["input"]["sha256"])
    # No padding: each shard array is exactly the sum of its examples' sizes.
    for part in store.parts.values():
        for q in WHAT:
            assert part.sizes[q] == sum(int(np.prod(e.data[q][1])) for e in part.examples)


def test_zarr_python_and_tensorstore_read_it_as_store_md_says(reference_store, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "STORE.md").read_text(), re.S)
    zarr_block = next(b for b in blocks if "import zarr" in b)
    ts_block = next(b for b in blocks if "import tensorstore" in b)
    store = jaxattn.open_store(reference_store)
    monkeypatch.chdir(reference_store.parent)
    for block, index in ((zarr_block, 3), (ts_block, 1)):  # the examples each block reads
        code = block.replace('STORE = "corpus.zarr"', f'STORE = "{reference_store.name}"')
        scope: dict = {}
        exec(compile(code, "STORE.md", "exec"), scope)
        np.testing.assert_array_equal(scope["attention"], store[index].attention)
        assert scope["entry"]["id"] == store.entries[index].id


@pytest.mark.parametrize("dtype", ["uint8", "bfloat16"])
def test_encoded_dtypes_round_trip(engines, bert_checkpoint, corpus, tmp_path, dtype):
    what = ("attention", "scores", "mixing_ratio")  # probability-valued and affine uint8
    run_dump(
        engines["bert"],
        options(corpus, tmp_path / "s", what=what, dtype=dtype),
        model_dir=bert_checkpoint,
    )
    store = jaxattn.open_store(tmp_path / "s")
    want = engines["bert"].capture(_shard_texts(1), what=what, dtype=dtype)
    for j, ref in enumerate(want):
        got = store[SHARD_SIZE + j]
        assert_same_capture(got, ref)  # encoded bytes and (scale, offset) identical
        np.testing.assert_array_equal(got.scores, ref.scores)


def test_rerun_of_a_finished_store_does_nothing(
    engines, bert_checkpoint, corpus, tmp_path, reference_store
):
    shutil.copytree(reference_store, tmp_path / "s")
    result = run_dump(engines["bert"], options(corpus, tmp_path / "s"), model_dir=bert_checkpoint)
    assert (result.counts.examples, result.shards, result.resumed) == (0, 2, 2)
    assert_same_store(jaxattn.open_store(tmp_path / "s"), jaxattn.open_store(reference_store))


def test_two_process_shares_complete_one_store(
    engines, bert_checkpoint, corpus, tmp_path, reference_store
):
    """Process p of 2 writes shards p, p+2, ...: run one share, then the other."""
    opts = options(corpus, tmp_path / "s")
    first = run_dump(engines["bert"], opts, model_dir=bert_checkpoint, process=Process(1, 2))
    assert (first.counts.examples, first.shards) == (4, 1)
    with pytest.raises(jaxattn.CaptureFileError, match="incomplete: 1 of 2 shards"):
        jaxattn.open_store(tmp_path / "s")
    partial = jaxattn.open_store(tmp_path / "s", partial=True)
    assert [e.id for e in partial.entries] == ["4", "5", "b3", "b4"] and not partial.complete
    run_dump(engines["bert"], opts, model_dir=bert_checkpoint, process=Process(0, 2))
    assert_same_store(jaxattn.open_store(tmp_path / "s"), jaxattn.open_store(reference_store))


def test_leftovers_of_a_killed_shard_are_replaced(
    engines, bert_checkpoint, corpus, tmp_path, reference_store
):
    store_dir = tmp_path / "s"
    shutil.copytree(reference_store, store_dir)
    # Shard 1 as a killed attempt leaves it: chunks written, no manifest part.
    shutil.rmtree(store_dir / "manifest" / "s000001")
    chunk = next((store_dir / "attention" / "s000001" / "c").iterdir())
    chunk.write_bytes(b"garbage")
    (store_dir / "attention" / "s000001" / "c" / "999").write_bytes(b"stale")
    result = run_dump(engines["bert"], options(corpus, store_dir), model_dir=bert_checkpoint)
    assert (result.counts.examples, result.resumed) == (4, 1)
    assert not (store_dir / "attention" / "s000001" / "c" / "999").exists()
    assert_same_store(jaxattn.open_store(store_dir), jaxattn.open_store(reference_store))


def _during_first_commit(monkeypatch, second):
    """Run `second()` once, as the dump in progress has committed its first shard."""
    from jaxattn.store.writer import ShardWriter

    commit, calls = ShardWriter.commit, []

    def patched(self, *args, **kwargs):
        part = commit(self, *args, **kwargs)
        if not calls:
            calls.append(1)
            second()
        return part

    monkeypatch.setattr(ShardWriter, "commit", patched)
    return calls


def test_a_second_dump_into_a_store_being_written_is_refused(
    engines, bert_checkpoint, corpus, tmp_path, reference_store, monkeypatch
):
    """The same command run twice at once, or another command, would redo and delete
    the shards the first writes (a committed shard's chunks gone): refused."""
    store_dir = tmp_path / "s"
    refused = []

    def second():
        before = sorted(p.relative_to(store_dir) for p in store_dir.rglob("*"))
        for change in ({}, dict(what=("attention",)), dict(overwrite=True)):
            for process in (None, Process(1, 2)):
                if change.get("overwrite") and process:
                    continue
                opts = options(corpus, store_dir, **change)
                with pytest.raises(jaxattn.UsageError, match="another jaxattn dump is writing"):
                    run_dump(engines["bert"], opts, model_dir=bert_checkpoint, process=process)
                refused.append(change)
        assert sorted(p.relative_to(store_dir) for p in store_dir.rglob("*")) == before

    calls = _during_first_commit(monkeypatch, second)
    run_dump(engines["bert"], options(corpus, store_dir), model_dir=bert_checkpoint)
    assert calls and len(refused) == 5
    assert_same_store(jaxattn.open_store(store_dir), jaxattn.open_store(reference_store))
    again = run_dump(engines["bert"], options(corpus, store_dir), model_dir=bert_checkpoint)
    assert (again.counts.examples, again.resumed) == (0, 2)  # the lock went with the job


def test_the_command_line_refuses_a_store_being_written_before_loading_the_model(
    corpus, tmp_path, capsys
):
    import fcntl
    import os

    from jaxattn.cli import main

    store_dir, missing = tmp_path / "s", tmp_path / "no-model"
    store_dir.mkdir()
    fd = os.open(store_dir, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a dump writing it holds it
    try:
        code = main(["dump", str(corpus), "--out", str(store_dir), "--model", str(missing)])
    finally:
        os.close(fd)
    err = capsys.readouterr().err
    assert code == 2 and "another jaxattn dump is writing this store now" in err, err
    assert list(store_dir.iterdir()) == []
    # a new --out: the check creates nothing (here the missing model ends the command)
    assert main(["dump", str(corpus), "--out", str(tmp_path / "new"), "--model", str(missing)])
    assert not (tmp_path / "new").exists()


def test_a_file_system_without_locks_is_written_unlocked(
    engines, bert_checkpoint, corpus, tmp_path, reference_store, monkeypatch
):
    import errno
    import fcntl

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    run_dump(engines["bert"], options(corpus, tmp_path / "s"), model_dir=bert_checkpoint)
    assert_same_store(jaxattn.open_store(tmp_path / "s"), jaxattn.open_store(reference_store))


def test_the_processes_of_one_job_write_at_once(
    engines, bert_checkpoint, corpus, tmp_path, reference_store, monkeypatch
):
    store_dir = tmp_path / "s"
    opts = options(corpus, store_dir)

    def second():
        run_dump(engines["bert"], opts, model_dir=bert_checkpoint, process=Process(1, 2))

    calls = _during_first_commit(monkeypatch, second)
    run_dump(engines["bert"], opts, model_dir=bert_checkpoint, process=Process(0, 2))
    assert calls
    assert_same_store(jaxattn.open_store(store_dir), jaxattn.open_store(reference_store))


def _changed(tmp_path, corpus, bert_checkpoint):
    other_input = write_jsonl(tmp_path / "other.jsonl", [*CORPUS[:-1], {"text": "hello"}])
    other_model = tmp_path / "model"
    shutil.copytree(bert_checkpoint, other_model)
    (other_model / "config.json").write_text(
        (other_model / "config.json").read_text().replace("{", '{"note": 1, ', 1)
    )
    yield "quantities", dict(what=("attention",)), bert_checkpoint
    yield "layers", dict(layers=(0, 1)), bert_checkpoint
    yield "heads", dict(heads=(2,)), bert_checkpoint
    yield "dtype", dict(dtype="float16"), bert_checkpoint
    yield "input", dict(input=other_input), bert_checkpoint
    yield "shard size", dict(shard_size=3), bert_checkpoint
    yield "too-long policy", dict(too_long="truncate"), bert_checkpoint
    yield "model", {}, other_model


def test_a_changed_command_is_refused(engines, bert_checkpoint, corpus, tmp_path, reference_store):
    store_dir = tmp_path / "s"
    shutil.copytree(reference_store, store_dir)
    before = sorted(p.relative_to(store_dir) for p in store_dir.rglob("*"))
    for name, change, model_dir in _changed(tmp_path, corpus, bert_checkpoint):
        opts = dataclasses.replace(options(corpus, store_dir), **change)
        with pytest.raises(StoreMismatch, match=f"different command: {name}"):
            run_dump(engines["bert"], opts, model_dir=model_dir)
    assert sorted(p.relative_to(store_dir) for p in store_dir.rglob("*")) == before
    with pytest.raises(StoreMismatch, match="Rerun the original command"):
        run_dump(
            engines["bert"], options(corpus, store_dir, what=("scores",)), model_dir=bert_checkpoint
        )


def test_reading_a_store_needs_no_jax(reference_store):
    code = (
        "import sys, jaxattn\n"
        f"store = jaxattn.open_store({str(reference_store)!r})\n"
        "assert store[0].attention.shape[0] == 3 and len(store) == 8\n"
        "heavy = [m for m in ('jax', 'flax', 'transformers', 'torch') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
