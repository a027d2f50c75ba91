"""--model NAME[@REV] on the command line: a capture by Hub name end to end (the real
entry point, against the stand-in), the grammar's usage errors, --model with --server
compared by commit, and the revision in ModelInfo, on the wire and in provenance."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jaxattn import Capture
from jaxattn.cli import main
from jaxattn.errors import UsageError
from jaxattn.info import ModelInfo


def _error_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_capture_by_hub_name_records_the_revision(hub, hub_env, tmp_path):
    out = tmp_path / "cap.npz"
    argv = ["capture", "hello", "--model", "org/tiny-bert@v1.0", "--out", str(out)]
    r = subprocess.run(
        [sys.executable, "-m", "jaxattn", *argv],
        env=hub_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    cap = Capture.load(out)
    assert cap.provenance["revision"] == hub.commits["v1.0"]
    assert cap.provenance["model"] == "org/tiny-bert" and cap.provenance["family"] == "bert"


@pytest.mark.parametrize(
    "model, says",
    [
        ("", "the model name '' is empty"),
        ("org/name@", "'org/name@' has an '@' but no revision after it"),
        ("@v1.0", "'@v1.0' has a revision but no model name before the '@'"),
        ("org/na me", "'org/na me' is neither an existing directory nor a Hugging Face Hub name"),
        ("org--x/y", "is neither an existing directory nor a Hugging Face Hub name"),
        ("{dir}@v1.0", "is a local directory, which has no revisions (revision 'v1.0')"),
        ("./elsewhere@main", "'./elsewhere' is a local path, which has no revisions"),
    ],
)
@pytest.mark.parametrize("command", ["capture", "loadtest"])
def test_a_bad_model_name_is_a_usage_error(command, model, says, tmp_path, capsys):
    model = model.format(dir=tmp_path)
    argv = {"capture": ["capture", "hello"], "loadtest": ["loadtest", "--server", "h:1"]}
    assert main([*argv[command], "--model", model]) == 2
    line = _error_line(capsys)
    assert line.startswith(f"jaxattn {command}: error: argument --model: ") and says in line


def test_a_model_that_is_nowhere_exits_2_naming_it(monkeypatch, tmp_path, capsys):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert constants.is_offline_mode()  # tests/conftest.py: never the real Hub
    assert main(["capture", "hello", "--model", "nobody/nothing"]) == 2
    assert _error_line(capsys) == (
        "jaxattn capture: error: nobody/nothing is neither a local directory nor in the "
        f"Hugging Face cache ({tmp_path / 'hub'}), and HF_HUB_OFFLINE=1 forbids downloading "
        "it: unset HF_HUB_OFFLINE, or give a local directory"
    )
    assert main(["capture", "hello", "--model", str(tmp_path / "gone")]) == 2
    line = _error_line(capsys)
    assert (
        f"model directory {tmp_path / 'gone'} does not exist (a checkpoint directory holds "
        "config.json, model.safetensors" in line
    )


class _Server:
    """A client of a server that loaded org/tiny-bert at `revision`."""

    def __init__(self, revision: str):
        self.info = ModelInfo(
            name="org/tiny-bert",
            family="bert",
            layers=3,
            heads=3,
            hidden=15,
            head_dim=5,
            vocab=99,
            max_positions=67,
            weights="blake2b:00",
            revision=revision,
        )

    def model_info(self):
        return self.info


def test_model_and_server_are_compared_by_commit_for_a_hub_name(monkeypatch):
    from jaxattn.checkpoints import hub
    from jaxattn.cli.source import check_same_model

    commits = {None: "a" * 40, "v1.0": "b" * 40}
    asked = []
    monkeypatch.setattr(hub, "resolve_commit", lambda name, rev: asked.append(name) or commits[rev])
    check_same_model(_Server("a" * 40), "org/tiny-bert", "h:1")  # no weights downloaded
    with pytest.raises(UsageError) as e:
        check_same_model(_Server("a" * 40), "org/tiny-bert@v1.0", "h:1")
    assert str(e.value).startswith(
        "--model org/tiny-bert@v1.0 is not the model the server h:1 serves "
        f"(org/tiny-bert@{'a' * 40}, 3 layers x 3 heads)"
    )
    assert asked == ["org/tiny-bert", "org/tiny-bert"]


def test_the_revision_is_in_model_info_on_the_wire_and_in_provenance(checkpoint_dirs):
    import jaxattn
    from jaxattn.checkpoints.loading import read_checkpoint, read_tokenizer
    from jaxattn.client import AttentionClient
    from jaxattn.engine import Engine
    from service import create_server

    path = checkpoint_dirs["bert"]
    local = jaxattn.load(path)
    assert local.info.revision == "" and local.provenance["revision"] == ""  # a local dir
    config, params = read_checkpoint(path)
    engine = Engine(config, params, read_tokenizer(path, config), revision="c" * 40)
    assert engine.provenance["revision"] == "c" * 40
    server, port = create_server(engine, "127.0.0.1:0")
    server.start()
    try:
        with AttentionClient([f"127.0.0.1:{port}"]) as client:
            assert client.model_info() == engine.info
            assert client.model_info().revision == "c" * 40
    finally:
        server.stop(grace=0.5).wait(10)
