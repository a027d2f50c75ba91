"""The dump's side of the one contract: what it refuses before writing anything (empty
input, an --out that is a file or someone's data, other weights, another --limit), what it
resumes (a store without a weights fingerprint), and TensorStore failures in one line."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
from dump_helpers import CORPUS, assert_same_capture, assert_same_store, options, write_jsonl

import jaxattn
from jaxattn.cli import build_parser, main
from jaxattn.dump import run_dump
from jaxattn.errors import CaptureFileError, InputError, UsageError
from jaxattn.store.metadata import StoreMismatch


class _OtherWeights:
    """The engine under test, reporting other weights (same model name and checkpoint)."""

    def __init__(self, engine):
        self._engine = engine
        self.info = dataclasses.replace(engine.info, weights="blake2b:not-the-same")

    def __getattr__(self, name):
        return getattr(self._engine, name)


def _copy(reference_store, tmp_path):
    shutil.copytree(reference_store, tmp_path / "s")
    return tmp_path / "s"


def test_weights_old_store_resumes_other_weights_are_refused(
    engines, bert_checkpoint, corpus, tmp_path, reference_store
):
    store_dir = _copy(reference_store, tmp_path)
    root = json.loads((store_dir / "zarr.json").read_text())
    assert root["attributes"]["jaxattn"]["model"]["weights"] == engines["bert"].info.weights
    del root["attributes"]["jaxattn"]["model"]["weights"]  # as jaxattn 0.2 wrote it
    (store_dir / "zarr.json").write_text(json.dumps(root))
    opts = options(corpus, store_dir)
    result = run_dump(engines["bert"], opts, model_dir=bert_checkpoint)
    assert (result.resumed, result.counts.examples) == (2, 0)
    store_dir = _copy(reference_store, tmp_path / "other")
    said = r"model weights \(fingerprint\): the store has 'blake2b:[0-9a-f]+', this command "
    with pytest.raises(StoreMismatch, match=said + "gives 'blake2b:not-the-same'"):
        run_dump(
            _OtherWeights(engines["bert"]), options(corpus, store_dir), model_dir=bert_checkpoint
        )


@pytest.mark.parametrize(
    "name, content, what",
    [
        ("empty.txt", "", "the file is empty"),
        ("blank.jsonl", "\n  \n\t\n", "it holds only blank lines"),
        ("notes.conllu", "# sent_id = 1\n\n", "it holds no sentence with a token line"),
    ],
)
def test_an_input_without_examples_fails_before_any_store_exists(
    engines, bert_checkpoint, tmp_path, capsys, name, content, what
):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(InputError, match=f"^{path} has no examples: {what}") as err:
        run_dump(engines["bert"], options(path, tmp_path / "s"), model_dir=bert_checkpoint)
    assert err.value.path == path
    assert main(["dump", str(path), "--out", str(tmp_path / "s")]) == 1  # before a model loads
    assert f"error: {path} has no examples" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_out_that_is_a_file_or_someones_data_is_refused(corpus, tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "notes.txt").write_text("mine")
    assert main(["dump", str(corpus), "--out", str(tmp_path / "f")]) == 2
    assert "is an existing file; a store is a directory: choose another --out" in (
        capsys.readouterr().err
    )
    assert main(["dump", str(corpus), "--out", str(tmp_path / "data")]) == 2
    assert "it may be someone's data" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["notes.txt"]


def test_limit_takes_the_first_records_and_is_part_of_the_identity(
    engines, bert_checkpoint, corpus, tmp_path, reference_store
):
    assert build_parser().parse_args(["dump", "x", "--out", "y", "--limit", "5"]).limit == 5
    run_dump(engines["bert"], options(corpus, tmp_path / "s", limit=5), model_dir=bert_checkpoint)
    store, reference = jaxattn.open_store(tmp_path / "s"), jaxattn.open_store(reference_store)
    assert store.metadata["input"]["records"] == 5 and [e.id for e in store.entries] == [
        e.id for e in reference.entries[:5]
    ]
    assert_same_store(store[:4], reference[:4])  # views compare as stores do
    assert_same_capture(store[4], reference[4], exact=False)  # a batch of 1, not 4
    with pytest.raises(
        StoreMismatch,
        match=r"record limit \(--limit\): the store has 5, this "
        r"command gives 6",
    ):
        run_dump(
            engines["bert"], options(corpus, tmp_path / "s", limit=6), model_dir=bert_checkpoint
        )
    with pytest.raises(UsageError, match="--limit must be at least 1, got 0"):
        run_dump(
            engines["bert"], options(corpus, tmp_path / "t", limit=0), model_dir=bert_checkpoint
        )


def test_tensorstore_write_failure_is_one_line(
    engines, bert_checkpoint, corpus, tmp_path, reference_store
):
    store_dir = _copy(reference_store, tmp_path)
    shutil.rmtree(store_dir / "manifest" / "s000001")  # shard 1 to redo...
    shutil.rmtree(store_dir / "fx_norm" / "s000001")
    (store_dir / "fx_norm" / "s000001").write_text("in the way")  # ...where a file blocks it
    with pytest.raises(CaptureFileError) as err:
        run_dump(engines["bert"], options(corpus, store_dir), model_dir=bert_checkpoint)
    text = str(err.value)
    assert text.startswith(
        f"cannot create the fx_norm array of shard 1 in the store at {store_dir}"
    )
    assert "\n" not in text and "tensorstore_spec" not in text
    assert text.endswith("fix the cause, then rerun the same command: it resumes at this shard")


def test_a_non_utf8_line_names_the_file_and_line(engines, bert_checkpoint, tmp_path):
    path = write_jsonl(tmp_path / "in.jsonl", CORPUS[:2])
    with open(path, "ab") as f:
        f.write(b'{"text": "caf\xe9"}\n')
    with pytest.raises(
        InputError,
        match=rf"^{path}:3: invalid UTF-8 at byte 14 \(pass "
        r"--on-error skip to skip bad records\)$",
    ) as err:
        run_dump(engines["bert"], options(path, tmp_path / "s"), model_dir=bert_checkpoint)
    assert (err.value.path, err.value.line) == (path, 3)
