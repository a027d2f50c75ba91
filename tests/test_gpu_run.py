"""The GPU run (benchmarks/gpu_run.sh, benchmarks/gpu_checks.py) works end to end on the CPU,
at tiny sizes, so a lent GPU's few minutes are never spent on a broken script.
No figure is asserted: they go to BENCHMARKS.md."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from jaxattn.checkpoints.loading import default_model_dir

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks/gpu_run.sh"
LONG_CONTEXT = ROOT / "benchmarks/long_context.py"


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


def run_clean(*stages: str, out: Path) -> str:
    """The stages' smoke run, which must end with every step done: its log."""
    got = run(*stages, out=out)
    log = (out / "run.log").read_text()
    assert got.returncode == 0, log[-3000:]
    assert "0 step(s) failed or skipped" in log
    return log


def test_an_unknown_stage_is_refused_by_name(tmp_path):
    got = run("sanity", "warm-up", out=tmp_path)
    assert got.returncode == 2
    assert "unknown stage warm-up" in got.stderr and "overlap" in got.stderr


def test_a_missing_tokenizer_says_to_prepare(tmp_path):
    got = run("sanity", out=tmp_path, JAXATTN_BENCH_TOKENIZER=str(tmp_path))
    assert got.returncode == 2 and "run 'prepare' here first" in got.stderr


def checks_module():
    """benchmarks/gpu_checks.py as a module (its imports are the standard library's)."""
    spec = importlib.util.spec_from_file_location("gpu_checks", ROOT / "benchmarks/gpu_checks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_long_context_table_names_a_block_asked_alone():
    """`--block 1024` alone: its table still says which block ran (it had no block
    column unless several ran); without --block, no column."""
    spec = importlib.util.spec_from_file_location("long_context", LONG_CONTEXT)
    long_context = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(long_context)
    row = dict(side="jaxattn", tokens=4096, first_s=2.0, peak_rss_mib=1024, grown_mib=512)
    eager = dict(side="eager", tokens=4096, skipped="not run: --stats-only")
    asked = long_context.table([row | dict(attention_block=1024, block=1024), eager])
    assert "| T | block | jaxattn s" in asked and "| 4,096 | 1024 | 2.00 |" in asked
    default = long_context.table([row | dict(attention_block=None, block=256), eager])
    assert "| T | jaxattn s" in default and "| 4,096 | 2.00 |" in default


def test_every_family_has_a_tiny_model_and_the_decoders_are_checked_first():
    """The one family list decides what sanity-families checks: a family added to it
    without a tiny checkpoint fails here (and the check names it)."""
    from jaxattn.bench.synthetic import TINY_FAMILIES
    from jaxattn.checkpoints.families import FAMILIES as TABLES
    from jaxattn.config import FAMILIES

    assert set(TINY_FAMILIES) == set(FAMILIES)
    order = checks_module().family_order()
    assert sorted(order) == sorted(FAMILIES)
    decoders = [f for f in FAMILIES if TABLES[f].fixed.get("causal")]
    assert order[: len(decoders)] == decoders and "llama" in decoders
    assert order[-1] == "modernbert" and "bert" in order[len(decoders) :]


def test_the_relative_difference_is_over_the_references_finite_scale():
    diff = checks_module().relative_difference
    ref = np.array([[-np.inf, 4.0], [np.nan, -2.0]])
    assert diff(ref.copy(), ref) == 0.0  # equal infinities and NaNs at the same places
    assert diff(ref + [[0, 0.02], [0, 0]], ref) == pytest.approx(0.02 / 4)
    assert diff(np.array([0.5, 0.25]), np.array([0.5, 0.0])) == 0.25  # scale at least 1
    assert diff(np.array([[-np.inf, 4.0], [1.0, -2.0]]), ref) == np.inf  # a NaN lost
    assert diff(np.array([[0.0, 4.0], [np.nan, -2.0]]), ref) == np.inf  # a mask lost


@pytest.mark.slow
def test_the_sanity_stage_checks_the_tiny_bert_and_every_family(tmp_path):
    from jaxattn.config import FAMILIES, PARALLEL_REFUSED

    log = run_clean("sanity", out=tmp_path)
    sanity = json.loads((tmp_path / "sanity.json").read_text())
    # The same tiny capture on this backend and in a child on the CPU backend.
    assert sanity["ok"] and set(sanity["max_relative_difference"]) >= {"attention", "keys"}
    families = json.loads((tmp_path / "sanity-families.json").read_text())
    assert families["ok"] and families["failed"] == []
    assert set(families["families"]) == set(FAMILIES)
    # Here the one backend's capture is compared with itself, and says so first.
    first = log.index("sanity-families: one backend (cpu)")
    for family in FAMILIES:
        assert log.index(f"sanity-families {family:10s}: ok: cpu vs itself, worst ") > first
        row = families["families"][family]
        # a parallel residual (GPT-NeoX's tiny model) refuses the AttnResLn-N measures
        least = 17 - (len(PARALLEL_REFUSED) if family == "gpt_neox" else 0)
        assert row["quantities"] == len(row["max_relative_difference"]) >= least, family
        # three lengths in one batch padded to 24 tokens, longer than every window
        first, second, third = row["lengths"]
        assert 24 >= first > 15 >= second > 8 >= third, family
    for family, check in (
        ("llama", "blockwise"),
        ("llama", "generate"),
        ("bert", "uint8"),
        ("bert", "bfloat16"),
        ("bert", "ablation"),
    ):
        assert f"sanity-families {family:10s}: {check} ok: " in log
    llama = families["families"]["llama"]["checks"]
    # Blockwise against dense is a real comparison on one backend too: 8-token blocks.
    assert llama["blockwise"]["block"] == 8
    assert 0 < max(llama["blockwise"]["max_relative_difference"].values()) <= 1e-5
    assert [len(ids) for ids in llama["generate"]["ids"][0]] == [4, 4]
    assert families["families"]["bert"]["checks"]["ablation"]["moved"] > 1e-3
    assert f"sanity-families: {len(FAMILIES)} of {len(FAMILIES)} families ok" in log


@pytest.mark.slow
def test_the_first_stages_run_and_write_their_figures(tmp_path):
    run_clean("precision", "service", out=tmp_path)
    precision = json.loads((tmp_path / "precision.json").read_text())
    for p in ("highest", "tf32", "bf16"):
        assert precision[f"forward_{p}_seq_per_s"] > 0 and precision[f"attention_{p}_s"] > 0
    assert precision["attention_highest_max_abs_diff"] == 0
    service = json.loads((tmp_path / "service.json").read_text())
    assert service["uint8_zstd_seq_per_s"] > 0 and service["float32_none_seq_per_s"] > 0
    # uint8 + zstd puts fewer bytes on the wire than float32 without compression.
    assert service["uint8_zstd_wire_bytes_per_seq"] < service["float32_none_wire_bytes_per_seq"]
    # Each way (threads of one client, processes), every codec, and uint8 with a larger
    # codec pool: the decoded maps of the tiny BERT, 2 layers x 3 heads x 16 x 16, a byte
    # or four each.
    for way in ("", "_processes"):
        for key, size in (("uint8_zstd", 1), ("float32_none", 4), ("codec16_uint8_zstd", 1)):
            assert service[f"{key}{way}_seq_per_s"] > 0
            assert service[f"{key}{way}_decoded_bytes_per_seq"] == 2 * 3 * 16 * 16 * size
            assert service[f"{key}{way}_server_cpu_s"] >= 0
            assert (
                0
                <= service[f"{key}{way}_server_codec_cpu_s"]
                <= service[f"{key}{way}_server_cpu_s"]
            )
    ways = {(r["codec_threads"], r["codec"], r["mode"]) for r in service["rounds"]}
    assert ways == {
        (t, c, m)
        for t, c in ((None, "uint8_zstd"), (None, "float32_none"), (16, "uint8_zstd"))
        for m in ("threads", "processes")
    }
    # The first server did the work of its rounds: CPU seconds it spent.
    assert sum(r["server_cpu_s"] for r in service["rounds"] if not r["codec_threads"]) > 0


@pytest.mark.slow
def test_the_first_stage_makes_one_checkpoint_and_splits_the_first_capture(tmp_path):
    log = run_clean("first", out=tmp_path)
    # One checkpoint step, before both runs, which load it.
    assert log.count("gpu_checks.py checkpoint") == 1
    assert log.index("gpu_checks.py checkpoint") < log.index("first_capture.py")
    assert log.count("first_capture.py --model") == 2 and "--random-bert-base" not in log
    cold, cached = re.findall(r"programs ([\d.]+) s \((\d+) XLA programs, (\d+) loaded", log)
    # The cold run compiles every program; the cached run loads them all from the cache
    # the cold run filled.
    assert int(cold[1]) > 0 and cold[2] == "0"
    assert cached[1] == cached[2] == cold[1]
    # Each run splits the rest: every program's first execution against its second (the
    # second capture runs each again), and the device's first use probed before.
    split = re.findall(r"the rest, split: (\d+) programs' first execution \(of (\d+) run", log)
    assert split == [(cold[1], cold[1])] * 2
    assert log.count("before the first capture, device first use (cpu): matmul ") == 2


def test_the_program_spans_count_overlapping_time_once():
    spec = importlib.util.spec_from_file_location(
        "first_capture", ROOT / "benchmarks/first_capture.py"
    )
    first = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "benchmarks"))  # it imports gpu_checks, beside it
    try:
        spec.loader.exec_module(first)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    spans = first.ProgramSpans.__new__(first.ProgramSpans)
    spans._lock, spans.spans, spans.compiles = threading.Lock(), [], 0
    for start, end in ((10.0, 12.0), (11.0, 13.0), (15.0, 16.0), (5.0, 9.0)):
        spans._span(first.PROGRAM_EVENTS[0], start, end)
    spans._span("/jax/some/other/event", 12.0, 20.0)  # not a program's: left out
    spans._span(first.PROGRAM_EVENTS[2], 12.5, 14.0)  # a compile beside the traces
    # Since 10: 10-14 (threads at once, counted once) and 15-16; since 11.5: 2.5 + 1.
    assert spans.wall(10.0) == 5.0 and spans.wall(11.5) == 3.5
    # each kind alone: the traces 10-13 and 15-16, the compile 12.5-14
    assert spans.wall(10.0, first.PROGRAM_EVENTS[:1]) == 4.0
    assert spans.wall(10.0, first.PROGRAM_EVENTS[2:]) == 1.5


def test_a_step_over_the_runs_budget_is_skipped_and_counted(tmp_path):
    got = run("levers", out=tmp_path, GPU_RUN_SECONDS="5")
    log = (tmp_path / "run.log").read_text()
    assert got.returncode == 1
    assert log.count("== skipped (the run's budget is spent)") == 3
    assert "3 step(s) failed or skipped" in log


def test_a_bad_gpu_run_blocks_entry_is_named_not_run_as_another(tmp_path):
    # "maps" was read as statistics alone, "4O" reached the script's arithmetic; with no
    # budget left the good entry is skipped at its step, never refused as an entry
    bad = ["bf16:40:4:maps", "bf16:4O:8", "bf16:40", "bf16:40:8:stats:x", "bf16:40:8,x"]
    got = run(
        "blocks",
        out=tmp_path,
        GPU_RUN_SECONDS="5",
        GPU_RUN_BLOCKS=" ".join(bad + ["bf16:40:8:stats"]),
    )
    log = (tmp_path / "run.log").read_text()
    assert got.returncode == 1
    named = re.findall(r"== skipped GPU_RUN_BLOCKS entry (\S+): expected PRECISION:T:B", log)
    assert named == bad
    assert "integer expression" not in log
    # the checkpoint, the good entry and the fast-forward check: over the budget
    assert log.count("== skipped (the run's budget is spent)") == 3
    assert f"{len(bad) + 3} step(s) failed or skipped" in log


@pytest.mark.slow
def test_one_shape_with_staged_outputs_runs(tmp_path):
    cmd = [sys.executable, str(ROOT / "benchmarks/gpu_checks.py"), "shape", "--tiny"]
    cmd += ["--tokens", "16", "--host-memory", "staged", "--what", "attention,fx_norm"]
    env = {**os.environ, "JAXATTN_BENCH_TOKENIZER": str(default_model_dir())}
    got = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-3000:]
    assert "host memory staged" in got.stdout and "seq/s" in got.stdout


@pytest.mark.slow
def test_the_split_check_times_the_full_capture_and_each_quantity_and_says_how_it_held_them(
    tmp_path,
):
    """The decoders stage's first step (issue 30) on the tiny Llama: every case, its bytes
    by hand, its plan and how the call held its results (here, on the CPU: views of one
    batch's block, nothing copied out, nothing grouped)."""
    checks = [sys.executable, str(ROOT / "benchmarks/gpu_checks.py")]
    env = {**os.environ, "JAXATTN_BENCH_TOKENIZER": str(default_model_dir())}
    model = tmp_path / "llama-1b"
    for args in (
        ["checkpoint", "--tiny", "--synthetic", "llama-1b", "--save", str(model)],
        ["split", "--model", str(model), "--tokens", "24", "-n", "2", "--repeats", "1"]
        + ["--json", str(tmp_path / "split.json")],
    ):
        got = subprocess.run(checks + args, env=env, capture_output=True, text=True, timeout=300)
        assert got.returncode == 0, got.stderr[-3000:]
    split = json.loads((tmp_path / "split.json").read_text())
    # The tiny Llama (jaxattn.bench.synthetic): 2 layers, 4 heads, 2 key/value heads of 6.
    L, H, G, K, T = 2, 4, 2, 6, 24
    by_hand = {
        "attention": L * H * T * T,
        "alpha_fx_norm": L * H * T * T,
        "queries": L * H * T * K,
        "keys": L * G * T * K,
        "fx_norm": L * H * T,
        "sum_alpha_fx_norm": L * T * T,
    }
    by_hand = {name: 2 * 4 * count for name, count in by_hand.items()}  # 2 texts, float32
    by_hand["full"] = by_hand["full_grouped_before"] = sum(by_hand.values())
    for case, nbytes in by_hand.items():
        row = split[case]
        assert row["bytes"] == nbytes, case
        assert row["plan"] == "batches of [2]" and row["group_layers"] == [], case
        assert (row["pinned_bytes"], row["copied_out_bytes"]) == (nbytes, 0), case
        assert row["assembled_bytes"] == 0 and row["best_s"] > 0, case
    assert split["full_trace"]["devices"] == []  # the CPU backend: no device events
    assert split["pinned_budget"] is None and split["example_budget"] == split["output_budget"]
    assert "split full no device events in the trace" in got.stdout


def long_rows(log: str) -> list[dict]:
    """benchmarks/long_context.py's JSON lines, as printed into run.log."""
    return [json.loads(line) for line in log.splitlines() if line.startswith('{"side": ')]


@pytest.mark.slow
def test_the_long_and_blocks_stages_share_a_checkpoint_and_print_their_rows(tmp_path):
    log = run_clean("long", "blocks", out=tmp_path)
    # $OUT returns at most 8 files: the rows are printed into run.log, not written apart
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "fast-forward-8192.json",
        "fast-forward.json",
        "run.log",
    ]
    assert log.count("long_context.py --preset llama-1b") == 2 + 3 + 1  # one --prepare
    fast = json.loads((tmp_path / "fast-forward.json").read_text())
    assert fast["ok"] and json.loads((tmp_path / "fast-forward-8192.json").read_text())["ok"]
    # On the CPU: layers 0..L-2 of a short input through XLA's dot_product_attention at
    # highest; bf16 is emulated here (operands rounded), so those layers stay dense.
    assert fast["highest_24"]["kind"] == "xla" and fast["bf16_24"]["kind"] is None
    rows = long_rows(log)
    runs = [(r["side"], r["precision"], r.get("attention_block")) for r in rows]
    # long: each precision's jaxattn row at the engine's block, and transformers beside;
    # blocks: one row per block, ascending, transformers not run for statistics alone
    assert runs == [
        ("jaxattn", "highest", None),
        ("eager", "highest", None),
        ("jaxattn", "bf16", None),
        ("eager", "bf16", None),
        *[("jaxattn", "bf16", b) for b in (4, 8, 16)],
        ("eager", "bf16", None),
        *[("jaxattn", "highest", b) for b in (8, 16)],
        ("eager", "highest", None),
        *[("jaxattn", "bf16", b) for b in (8, 64)],
        ("eager", "bf16", None),
    ]
    stats_only = {4, 5, 6, 8, 9}  # the rows of the blocks stage's --stats-only runs
    for i, row in enumerate(rows):
        assert "error" not in row, row
        if row["side"] == "jaxattn":
            # blockwise, at the block asked (the engine's default in the long stage)
            assert row["block"] == (row["attention_block"] or 256) and row["second_s"] > 0
            # the last query rows' maps timed first, except for statistics alone
            assert ("rows_second_s" in row) == (i not in stats_only), row
        else:  # transformers runs float32 only, and not for statistics alone
            assert ("skipped" in row) == (i != 1), row
    assert "not run: --stats-only" in rows[7]["skipped"]
    # the blocks' table has a block column
    assert "| T | block | jaxattn s" in log and "| 40 | 16 |" in log and "| 40 | 64 |" in log


def test_the_generate_stage_serving_benchmark_runs_without_patching_the_batcher():
    """benchmarks/service_generate.py (the generate stage) chooses its arms with the
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


def test_the_service_check_stops_its_server_when_a_client_process_dies(monkeypatch, tmp_path):
    """A client process that dies mid-round is named, and the server child is stopped
    all the same: left running, it would hold the GPU through the stages after."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # the spawned clients import it
    import gpu_checks

    servers = []

    def serve_child(model, extra, env=None):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        servers.append(proc)
        return proc, "127.0.0.1:1"  # nothing listens there: a client process's call fails

    class Threads:  # the threads' rounds pass, as against a live server
        pids = [os.getpid()]

        def __init__(self, *args):
            pass

        def round(self, dtype, codec, requests):
            return 1, 1, 1

        def close(self):
            pass

    monkeypatch.setattr(gpu_checks, "serve_child", serve_child)
    monkeypatch.setattr(gpu_checks, "ClientThreads", Threads)
    try:
        with pytest.raises(RuntimeError, match=r"client process 1 of 1 \(pid \d+\) exited"):
            gpu_checks.service(8, 2, 2, 1, True, None, model=str(tmp_path))
        assert servers and servers[0].poll() is not None  # stopped, not left running
    finally:
        for proc in servers:
            proc.kill()
            proc.wait()


def test_host_overhead_times_texts_of_the_asked_length_in_the_model_s_own_tokens(tmp_path):
    """benchmarks/host_overhead.py (the overlap stage's host split) runs, and with --model
    its texts have --tokens tokens as that model's tokenizer counts them: a random Qwen2
    reads BERT's words letter by letter (`jaxattn.bench.capture.fitted_texts`)."""
    from jaxattn.bench import synthetic

    tiny = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=2)
    tiny |= dict(num_key_value_heads=1, head_dim=16, intermediate_size=24)
    model = synthetic.random_checkpoint("qwen2-0.5b", tmp_path / "qwen2", **tiny)
    out = tmp_path / "host.json"
    args = ["--model", str(model), "--n", "4", "--tokens", "16", "--repeats", "1"]
    got = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/host_overhead.py"), *args, "--json", str(out)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert got.returncode == 0, got.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["lengths"] == [16] and result["n"] == 4
    assert result["capture_ms"] > 0 and set(result["phases_ms"]) >= {"tokenize", "unpack"}
