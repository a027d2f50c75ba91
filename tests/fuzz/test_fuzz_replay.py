"""Every fuzz target's short deterministic run (`harness.replay`): the committed corpus,
the seeds and a fixed set of mutated inputs, so a regression of any parser shows in the
default suite. The long coverage-guided runs: `scripts/fuzz.sh` (RELIABILITY.md, Fuzzing).
"""

from __future__ import annotations

import subprocess
import sys

import harness
import pytest

# Mutated inputs per target, by its speed (a tokenizer load is slow, a wire message
# fast): about 15 s for all of them on a shared 2-core machine.
MUTANTS = {
    "capture_file": 500,
    "capture_request": 2000,
    "checkpoint_config": 500,
    "inputs_conllu": 400,
    "inputs_jsonl": 700,
    "inputs_text": 600,
    "native_config": 300,
    "store_manifest": 200,
    "tokenizer_file": 40,
    "tokens_file": 500,
    "wire_receive": 2000,
}


@pytest.fixture(scope="module", autouse=True)
def tiny_model(bert_checkpoint, engines):
    """The session's tiny BERT (checkpoint and engine) for the targets that need a model."""
    harness.use_checkpoint(bert_checkpoint)
    import fuzz_capture_request

    fuzz_capture_request.prepare(engines["bert"])


def test_every_target_file_is_replayed():
    assert set(MUTANTS) == set(harness.TARGETS), harness.TARGETS


@pytest.mark.parametrize("name", harness.TARGETS)
def test_target_keeps_its_contract(name):
    assert harness.replay(name, MUTANTS[name]) > MUTANTS[name]


def test_atheris_runs_a_target(tmp_path):
    """`tests/fuzz/run.py` under atheris (what scripts/fuzz.sh runs): a short
    coverage-guided run of the lightest target, on a scratch corpus."""
    pytest.importorskip("atheris", reason="atheris (dev extra, Linux x86_64 wheels) not here")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    run = subprocess.run(
        [sys.executable, str(harness.HERE / "run.py"), "inputs_text", "-runs=300", "-seed=1"]
        + [f"-artifact_prefix={tmp_path}/", str(corpus)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Done 300 runs" in run.stderr, run.stderr[-2000:]
