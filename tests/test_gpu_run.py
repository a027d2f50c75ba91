"""The GPU run (benchmarks/gpu_run.sh, benchmarks/gpu_checks.py) works end to end on the CPU,
at tiny sizes, so a lent GPU's few minutes are never spent on a broken script.
No figure is asserted: they go to BENCHMARKS.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxattn.checkpoints.loading import default_model_dir

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks/gpu_run.sh"


def run(*args: str, out: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {
        **os.environ,
        "OUT": str(out),
        "PYTHON": sys.executable,
        "GPU_RUN_SMOKE": "1",
        "JAXATTN_BENCH_TOKENIZER": str(default_model_dir()),
        **env,
    }
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=environ, capture_output=True, text=True, timeout=600
    )


def test_an_unknown_stage_is_refused_by_name(tmp_path):
    got = run("sanity", "warm-up", out=tmp_path)
    assert got.returncode == 2
    assert "unknown stage warm-up" in got.stderr and "overlap" in got.stderr


def test_a_missing_tokenizer_says_to_prepare(tmp_path):
    got = run("sanity", out=tmp_path, JAXATTN_BENCH_TOKENIZER=str(tmp_path))
    assert got.returncode == 2 and "run 'prepare' here first" in got.stderr


@pytest.mark.slow
def test_the_first_stages_run_and_write_their_figures(tmp_path):
    got = run("sanity", "precision", "service", out=tmp_path)
    log = (tmp_path / "run.log").read_text()
    assert got.returncode == 0, log[-3000:]
    assert "0 step(s) failed or skipped" in log
    sanity = json.loads((tmp_path / "sanity.json").read_text())
    # The same tiny capture on this backend and in a child on the CPU backend.
    assert sanity["ok"] and set(sanity["max_relative_difference"]) >= {"attention", "keys"}
    precision = json.loads((tmp_path / "precision.json").read_text())
    for p in ("highest", "tf32", "bf16"):
        assert precision[f"forward_{p}_seq_per_s"] > 0 and precision[f"attention_{p}_s"] > 0
    assert precision["attention_highest_max_abs_diff"] == 0
    service = json.loads((tmp_path / "service.json").read_text())
    assert service["uint8_zstd_seq_per_s"] > 0 and service["float32_none_seq_per_s"] > 0
    # uint8 + zstd puts fewer bytes on the wire than float32 without compression.
    assert service["uint8_zstd_wire_bytes_per_seq"] < service["float32_none_wire_bytes_per_seq"]


def test_a_step_over_the_runs_budget_is_skipped_and_counted(tmp_path):
    got = run("levers", out=tmp_path, GPU_RUN_SECONDS="5")
    log = (tmp_path / "run.log").read_text()
    assert got.returncode == 1
    assert log.count("== skipped (the run's budget is spent)") == 3
    assert "3 step(s) failed or skipped" in log


@pytest.mark.slow
def test_one_shape_with_staged_outputs_runs(tmp_path):
    cmd = [sys.executable, str(ROOT / "benchmarks/gpu_checks.py"), "shape", "--tiny"]
    cmd += ["--tokens", "16", "--host-memory", "staged", "--what", "attention,fx_norm"]
    env = {**os.environ, "JAXATTN_BENCH_TOKENIZER": str(default_model_dir())}
    got = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-3000:]
    assert "host memory staged" in got.stdout and "seq/s" in got.stdout


@pytest.mark.slow
def test_the_long_stage_runs_the_fast_forward_check_and_both_precisions(tmp_path):
    got = run("long", out=tmp_path)
    log = (tmp_path / "run.log").read_text()
    assert got.returncode == 0, log[-3000:]
    assert "0 step(s) failed or skipped" in log
    fast = json.loads((tmp_path / "fast-forward.json").read_text())
    assert fast["ok"]
    # On the CPU: layers 0..L-2 of a short input through XLA's dot_product_attention at
    # highest; bf16 is emulated here (operands rounded), so those layers stay dense.
    assert fast["highest_24"]["kind"] == "xla" and fast["bf16_24"]["kind"] is None
    for precision in ("highest", "bf16"):
        rows = (tmp_path / f"long-{precision}-40/raw.jsonl").read_text().splitlines()
        jax_row, eager = (json.loads(r) for r in rows)
        assert jax_row["block"] > 0 and jax_row["second_s"] > 0 and jax_row["rows_second_s"] > 0
        # transformers runs float32 only: beside bf16 it is not run, and says why
        assert ("skipped" in eager) == (precision == "bf16")


def test_the_decoders_stage_serving_benchmark_runs_without_patching_the_batcher():
    """benchmarks/service_generate.py (the decoders stage) chooses its arms with the
    server's options, not by patching the batcher's internals, which moved under it once;
    its three prints come out (merged/alone, a step per turn, the whole generation)."""
    cmd = [sys.executable, str(ROOT / "benchmarks/service_generate.py")]
    done = subprocess.run(
        [*cmd, "--new", "2", "--rounds", "1", "--clients", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "merged" in done.stdout and "one run each" in done.stdout, done.stdout
    assert "a step per turn" in done.stdout and "in one turn" in done.stdout, done.stdout
