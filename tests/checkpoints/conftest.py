"""Fixtures for the checkpoint tests: private copies of the session's tiny checkpoints,
each broken in one way by the test that uses it."""

from __future__ import annotations

import json
import shutil

import pytest


@pytest.fixture
def bert_copy(checkpoint_dirs, tmp_path):
    """A copy of the tiny BERT checkpoint (D=15, 3 layers x 3 heads) to damage."""
    return shutil.copytree(checkpoint_dirs["bert"], tmp_path / "bert")


@pytest.fixture
def edit_config():
    """edit_config(path, **fields): rewrite path/config.json with fields changed
    (a value of None removes the field)."""

    def edit(path, **fields):
        config = json.loads((path / "config.json").read_text())
        for key, value in fields.items():
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value
        (path / "config.json").write_text(json.dumps(config, indent=2))
        return config

    return edit


@pytest.fixture(scope="module")
def native_dir(checkpoint_dirs, tmp_path_factory):
    """The tiny BERT checkpoint converted to the jaxattn (orbax) format, once per module."""
    from jaxattn.checkpoints import convert_checkpoint

    return convert_checkpoint(checkpoint_dirs["bert"], tmp_path_factory.mktemp("native") / "out")
