"""`jaxattn.bench.device_trace`: a trace's device time summed by kind, against
hand-computed intervals; and the GPU run's `profile` check on the CPU (no device events:
said so, the trace kept)."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

from jaxattn.bench import device_trace
from jaxattn.checkpoints.loading import default_model_dir

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("MemcpyD2H", "copy_d2h"),
        ("Memcpy DtoH (Device -> Pinned)", "copy_d2h"),
        ("MemcpyH2D", "copy_h2d"),
        ("Memcpy HtoD (Pageable -> Device)", "copy_h2d"),
        ("MemcpyD2D", "copy_other"),
        ("Memset (Device)", "memset"),
        ("loop_multiply_fusion", "compute"),
        ("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n", "compute"),
        ("copy_fusion", "compute"),  # an XLA kernel that copies on the device: a kernel
    ],
)
def test_events_are_sorted_into_kinds_by_their_names(name, kind):
    assert device_trace.kind_of(name) == kind


def _meta(pid, name, tid=None, thread=None):
    if tid is None:
        return {"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}}
    return {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": thread}}


def _x(pid, tid, name, start_us, end_us):
    return {
        "ph": "X",
        "pid": pid,
        "tid": tid,
        "name": name,
        "ts": start_us,
        "dur": end_us - start_us,
    }


def test_busy_time_is_a_union_per_kind_and_the_copies_beside_kernels_are_counted():
    events = [
        _meta(1, "/host:CPU"),
        _meta(2, "/device:GPU:0"),
        _meta(2, "", tid=7, thread="Stream #7"),
        _meta(2, "", tid=8, thread="Stream #8"),
        _meta(2, "", tid=9, thread="Stream #9(MemcpyD2H)"),
        # kernels on two streams, overlapping: busy 0-20 ms once, not 8 + 10 + 10
        _x(2, 7, "gemm", 0, 10_000),
        _x(2, 7, "gemm", 12_000, 20_000),
        _x(2, 8, "softmax_fusion", 5_000, 15_000),
        # copies: 8-14 ms beside kernels (6 ms), 20-26 ms alone
        _x(2, 9, "MemcpyD2H", 8_000, 14_000),
        _x(2, 9, "MemcpyD2H", 20_000, 26_000),
        _x(2, 9, "Memset", 30_000, 31_000),
        # the host's events are not the device's
        _x(1, 1, "PjitFunction(step)", 0, 40_000),
    ]
    (gpu,) = device_trace.summarize(events)["devices"]
    assert gpu["device"] == "/device:GPU:0" and gpu["events"] == 6
    assert gpu["span_ms"] == pytest.approx(31.0)
    assert gpu["busy_ms"] == pytest.approx(
        {"compute": 20.0, "copy_d2h": 12.0, "copy_h2d": 0.0, "copy_other": 0.0, "memset": 1.0}
    )
    assert gpu["d2h_beside_compute_ms"] == pytest.approx(6.0)
    assert gpu["d2h_hidden"] == pytest.approx(0.5)
    assert gpu["idle_ms"] == pytest.approx(4.0)  # 26-30 ms: nothing ran
    assert [(k["name"], k["count"]) for k in gpu["top_kernels"]] == [
        ("gemm", 2),
        ("softmax_fusion", 1),
    ]
    assert gpu["top_kernels"][0]["ms"] == pytest.approx(18.0)
    lines = device_trace.describe({"devices": [gpu]})
    assert "(50% of the copies)" in lines[0] and "idle 4.0 ms" in lines[0]


def test_no_copies_and_no_device_are_said_not_guessed():
    events = [_meta(2, "/device:GPU:0"), _x(2, 7, "gemm", 0, 1_000)]
    (gpu,) = device_trace.summarize(events)["devices"]
    assert gpu["d2h_hidden"] is None and gpu["idle_ms"] == 0
    host_only = [_meta(1, "/host:CPU"), _x(1, 1, "PjitFunction(step)", 0, 40_000)]
    assert device_trace.summarize(host_only) == {"devices": []}
    assert "no device events" in device_trace.describe({"devices": []})[0]


def test_the_profile_check_traces_a_capture_and_keeps_the_trace(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("JAXATTN_BENCH_TOKENIZER", str(default_model_dir()))
    spec = importlib.util.spec_from_file_location("gpu_checks", ROOT / "benchmarks/gpu_checks.py")
    checks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checks)
    out, trace = tmp_path / "profile.json", tmp_path / "trace.json.gz"
    checks.profile(16, 8, True, out, "highest", "staged", trace)
    result = json.loads(out.read_text())
    assert result["platform"] == "cpu" and result["n"] == 8
    for case in ("attention", "uint8"):
        assert result[case]["seq_per_s"] > 0
        assert result[case]["devices"] == []  # the CPU backend: said, not guessed
        with gzip.open(tmp_path / f"trace-{case}.json.gz", "rt") as f:  # the case's trace
            names = {e.get("name", "") for e in json.load(f)["traceEvents"]}
        assert any(name.startswith("PjitFunction") for name in names)
    assert capsys.readouterr().out.count("no device events") == 2


def test_union_and_intersection_walk_both_lists():
    assert device_trace.union([(12, 14), (0, 10), (5, 11), (3, 3), (20, 26)]) == [
        (0, 11),
        (12, 14),
        (20, 26),
    ]
    a, b = [(8, 14), (20, 26)], [(0, 10), (12, 22), (25, 30)]
    assert device_trace.intersection(a, b) == [(8, 10), (12, 14), (20, 22), (25, 26)]
    assert device_trace.intersection(b, a) == [(8, 10), (12, 14), (20, 22), (25, 26)]
