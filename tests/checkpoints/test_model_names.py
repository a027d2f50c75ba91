"""How a model is named: the grammar of `jaxattn.load(model, revision=)` and --model
(`jaxattn.checkpoints.model_ref`), the errors a missing model gets (jaxattn errors that
are also the built-in class), the one family list wherever families are named, and a
sharded safetensors checkpoint in a local directory."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import jaxattn
from jaxattn.checkpoints import read_checkpoint
from jaxattn.checkpoints.model_ref import ModelRef, parse_model
from jaxattn.config import FAMILIES
from jaxattn.errors import (
    JaxattnError,
    ModelNotFoundError,
    NotAModelDirectoryError,
    UsageError,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "given, revision, name, want_revision, hub",
    [
        ("bert-base-uncased", None, "bert-base-uncased", None, True),
        ("org/name", None, "org/name", None, True),
        ("org/name@v1.0", None, "org/name", "v1.0", True),
        (
            "org/name",
            "0123456789abcdef0123456789abcdef01234567",
            "org/name",
            "0123456789abcdef0123456789abcdef01234567",
            True,
        ),
        ("org/name@refs/pr/1", None, "org/name", "refs/pr/1", True),
        ("./nowhere", None, "./nowhere", None, False),
        ("/abs/nowhere", None, "/abs/nowhere", None, False),
        ("org/name/sub", None, "org/name/sub", None, False),
        ("~/models/x", None, "~/models/x", None, False),
        ("org/name/", None, "org/name/", None, False),
    ],
)
def test_the_grammar_of_a_model_name(given, revision, name, want_revision, hub):
    ref = parse_model(given, revision)
    assert (ref.name, ref.revision, ref.hub, str(ref)) == (name, want_revision, hub, given)


def test_an_existing_directory_wins_over_a_hub_name(tmp_path, monkeypatch):
    (tmp_path / "org" / "name").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    ref = parse_model("org/name")
    assert not ref.hub and ref.resolve().path == Path("org/name")
    assert ref.resolve().revision == "" and ref.resolve().name is None
    assert not parse_model(tmp_path).hub  # a Path is always local
    with pytest.raises(UsageError, match="'org/name' is a local directory, which has no revis"):
        parse_model("org/name@v1")
    with pytest.raises(UsageError, match="is a local directory, which has no revisions"):
        parse_model(tmp_path, "v1")


@pytest.mark.parametrize(
    "given, revision, says",
    [
        ("", None, "the model name '' is empty"),
        ("  ", None, "the model name '  ' is empty"),
        ("org/name@", None, "has an '@' but no revision after it"),
        ("@main", None, "has a revision but no model name before the '@'"),
        ("org/name@v1", "v2", "'org/name@v1' and revision='v2': give the revision once"),
        ("org/name", "v 1", "revision 'v 1' of 'org/name' is not a branch, tag or commit"),
        ("org/na me", None, "is neither an existing directory nor a Hugging Face Hub name"),
        ("a..b", None, "is neither an existing directory nor a Hugging Face Hub name"),
        ("-org/x", None, "is neither an existing directory nor a Hugging Face Hub name"),
        ("org//name", None, "is neither an existing directory nor a Hugging Face Hub name"),
        ("./x@v1", None, "'./x' is a local path, which has no revisions"),
        (3, None, "the model must be a local directory or a Hugging Face Hub name (a string"),
        (b"org/name", None, "(a string or a path; None: the embedded model), got bytes"),
    ],
)
def test_a_bad_model_name_is_a_usage_error(given, revision, says):
    with pytest.raises(UsageError, match=re.escape(says)):
        parse_model(given, revision)


def test_a_revision_without_a_name_is_a_usage_error():
    with pytest.raises(UsageError, match="revision='v1' needs a Hub model name"):
        jaxattn.load(revision="v1")


def test_a_leading_tilde_is_the_home_directory_unless_a_directory_of_that_name_exists(
    tmp_path, monkeypatch
):
    home, work = tmp_path / "home", tmp_path / "work"
    (home / "models" / "x").mkdir(parents=True)
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    ref = parse_model("~/models/x")  # as `--model=~/models/x` gets it: no shell expanded it
    assert not ref.hub and ref.resolve().path == home / "models" / "x"
    assert str(ref) == "~/models/x"  # named as given
    with pytest.raises(ModelNotFoundError, match=r"^model directory ~/models/y does not exist"):
        parse_model("~/models/y").resolve()
    (work / "~" / "models" / "x").mkdir(parents=True)  # a directory named "~" here wins
    assert parse_model("~/models/x").resolve().path == Path("~/models/x")


def test_a_missing_model_is_a_jaxattn_error_and_a_file_not_found(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert constants.is_offline_mode()  # tests/conftest.py: never the real Hub
    for missing, says in [
        ("missing", "missing is neither a local directory nor in the Hugging Face cache"),
        (
            tmp_path / "nowhere",
            f"model directory {tmp_path / 'nowhere'} does not exist (a "
            "checkpoint directory holds config.json, model.safetensors, "
            "model.safetensors.index.json with its shards or pytorch_model.bin, and tokenizer "
            "files; a Hugging Face Hub name is NAME or ORG/NAME[@REVISION])",
        ),
    ]:
        with pytest.raises(ModelNotFoundError) as e:
            jaxattn.load(missing)
        assert isinstance(e.value, JaxattnError) and isinstance(e.value, FileNotFoundError)
        assert str(e.value).startswith(says) and e.value.exit_code == 2
    with pytest.raises(ModelNotFoundError, match=r"^model directory \./nowhere does not exist"):
        jaxattn.load("./nowhere")  # named as given
    (tmp_path / "file").write_text("")
    with pytest.raises(NotAModelDirectoryError) as e:
        jaxattn.load(tmp_path / "file")
    assert isinstance(e.value, NotADirectoryError) and isinstance(e.value, JaxattnError)


def test_missing_files_in_a_directory_are_named_as_jaxattn_errors(bert_copy):
    for name in ("tokenizer.json", "vocab.txt"):
        (bert_copy / name).unlink()
    with pytest.raises(
        ModelNotFoundError,
        match=re.escape(
            f"{bert_copy} has no tokenizer: looked for tokenizer.json, vocab.txt, vocab.json"
        ),
    ):
        jaxattn.load(bert_copy)
    (bert_copy / "model.safetensors").unlink()
    with pytest.raises(ModelNotFoundError, match="has no weights: looked for model.safetensors"):
        jaxattn.load(bert_copy)
    (bert_copy / "config.json").unlink()
    with pytest.raises(ModelNotFoundError, match="has no config.json"):
        jaxattn.load(bert_copy)


def test_a_model_ref_is_a_path_once_resolved(checkpoint_dirs):
    ref = parse_model(str(checkpoint_dirs["bert"]))
    assert isinstance(ref, ModelRef) and Path(ref) == checkpoint_dirs["bert"]
    assert parse_model(ref) is ref


def _names(text: str, family: str) -> bool:
    """Whether prose names a family as a word, in any case ("DeBERTa-v2/v3" names
    deberta-v2; "RoBERTa" names roberta, and "XLM-RoBERTa" alone does not)."""
    return re.search(rf"(?<![\w-]){re.escape(family)}(?!\w)", text, re.IGNORECASE) is not None


# The prose lists of the families (file -> the words that begin its list; the list runs to
# the paragraph's end): each must name every family of the tables, so a family added to
# `jaxattn.checkpoints.families` fails here until the prose names it too.
PROSE = {
    "README.md": "jaxattn runs the encoders people",
    "docs/models.md": "jaxattn reads checkpoints of the families",
    "docs/families.md": "| model_type | family (ModelInfo) |",
    "docs/python.md": "A local directory may hold a checkpoint",
    "docs/errors.md": "jaxattn reads the families",
    "docs/tutorial.ipynb": "of another encoder (",
    "protos/jaxattn/v1/attention.proto": "// Architecture family:",
}


def _passage(name: str, start: str) -> str:
    """The paragraph of a file that begins with `start` (to the next blank line)."""
    text = (ROOT / name).read_text(encoding="utf-8")
    assert start in text, f"{name} no longer holds {start!r}: update PROSE"
    return text[text.index(start) :].split("\n\n")[0]


def test_every_family_is_named_wherever_families_are_listed(capsys):
    from jaxattn.checkpoints.families import FAMILIES as TABLES
    from jaxattn.checkpoints.families import supported
    from jaxattn.cli import main

    # The config's list of names (the numpy-only contract cannot import the tables).
    assert tuple(TABLES) == FAMILIES
    assert main(["--help"]) == 0
    top = capsys.readouterr().out
    assert main(["convert", "--help"]) == 0
    convert = capsys.readouterr().out
    texts = [
        ("jaxattn --help", top),
        ("convert --help", convert),
        ("load's docstring", inspect.getdoc(jaxattn.load)),
        ("supported()", supported()),
    ]
    texts += [(name, _passage(name, start)) for name, start in PROSE.items()]
    for family in TABLES:
        for where, text in texts:
            assert _names(" ".join(text.split()), family), f"{where} does not name {family}"
    assert "BERT/RoBERTa/DistilBERT" not in top + convert + (ROOT / "docs/errors.md").read_text()


def test_a_sharded_safetensors_directory_loads_as_the_whole_file(bert_copy, checkpoint_dirs):
    state = load_file(str(bert_copy / "model.safetensors"))
    (bert_copy / "model.safetensors").unlink()
    names = [
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
    ]
    weight_map = {key: names[i % 3] for i, key in enumerate(sorted(state))}
    for name in names:
        save_file({k: v for k, v in state.items() if weight_map[k] == name}, bert_copy / name)
    index = {"metadata": {}, "weight_map": weight_map}
    (bert_copy / "model.safetensors.index.json").write_text(json.dumps(index))
    config, params = read_checkpoint(bert_copy)
    want_config, want = read_checkpoint(checkpoint_dirs["bert"])
    assert dataclasses.replace(config, name=want_config.name) == want_config
    _same(params, want)
    assert (
        jaxattn.load(bert_copy).info.weights == jaxattn.load(checkpoint_dirs["bert"]).info.weights
    )


def _same(a, b) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], dict):
            _same(a[key], b[key])
        else:
            np.testing.assert_array_equal(a[key], b[key])


def test_only_a_leading_tilde_as_given_is_the_home_directory(tmp_path, monkeypatch):
    """'./~/models/x' is a directory named '~' here (pathlib drops the './', and read so
    it loaded the home directory's model), and '~nosuchuser/x' a directory that does not
    exist (pathlib's expanduser raised RuntimeError: an internal error)."""
    home, work = tmp_path / "home", tmp_path / "work"
    (home / "models" / "x").mkdir(parents=True)
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    for name in ("./~/models/x", "./~"):
        with pytest.raises(ModelNotFoundError, match=rf"^model directory {re.escape(name)} does"):
            parse_model(name).resolve()
    with pytest.raises(ModelNotFoundError, match=r"^model directory ~nosuchuser/x does not"):
        parse_model("~nosuchuser/x").resolve()
    assert parse_model("~").resolve().path == home
    (work / "~" / "models" / "x").mkdir(parents=True)
    assert parse_model("./~/models/x").resolve().path == Path("~/models/x")  # relative
