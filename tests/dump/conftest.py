"""Fixtures for the dump tests (helpers live in dump_helpers.py)."""

from __future__ import annotations

import pytest
from dump_helpers import CORPUS, options, write_jsonl

from jaxattn.dump import run_dump


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """The 8-record JSONL corpus file."""
    return write_jsonl(tmp_path_factory.mktemp("dump_corpus") / "corpus.jsonl", CORPUS)


@pytest.fixture(scope="session")
def reference_store(engines, bert_checkpoint, corpus, tmp_path_factory):
    """The corpus dumped in this process: one device, uninterrupted."""
    out = tmp_path_factory.mktemp("dump_reference") / "store.zarr"
    run_dump(engines["bert"], options(corpus, out), model_dir=bert_checkpoint)
    return out


@pytest.fixture(scope="session")
def compile_cache(tmp_path_factory):
    """A persistent compilation cache shared by the session's subprocesses."""
    return tmp_path_factory.mktemp("dump_compile_cache")
