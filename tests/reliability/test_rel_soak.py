"""The soak (`jaxattn.bench.soak`, benchmarks/soak.py) in miniature, its sampler and its verdict.

The real soak runs for hours (RELIABILITY.md, "Soak"); here it runs 4 s or until its
two restarts are done (one SIGTERM, one SIGKILL) on the fixtures' tiny BERT with 2
`jaxattn serve` replicas, calls cancelled mid-stream and client processes SIGKILLed
mid-call, and must count every call: 0 wrong, 0 lost, only designed statuses.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest
from rel_support import SENTENCES, WHAT

from jaxattn.bench.proc_sampler import ProcSampler, read_proc
from jaxattn.bench.soak_report import FAIL, NOT_JUDGED, PASS, judge, markdown, svg

pytestmark = pytest.mark.slow


CHILD = """
import sys, threading, time
files = [open(sys.argv[1] + str(i), "w") for i in range(int(sys.argv[2]))]
stop = threading.Event()
for _ in range(int(sys.argv[3])):
    threading.Thread(target=stop.wait, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""


def _child_sample(tmp_path, files: int, threads: int):
    """read_proc of a child holding `files` more open files and `threads` more threads
    than a bare interpreter (this test process's own threads come and go with the suite)."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path / f"{files}-"), str(files), str(threads)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline() == "ready\n"
        return read_proc(child.pid)
    finally:
        child.stdin.close()
        child.wait(10)


def test_sampler_counts_fds_threads_and_rss(tmp_path):
    before, after = _child_sample(tmp_path, 0, 0), _child_sample(tmp_path, 5, 3)
    assert after.fds - before.fds == 5
    assert after.threads - before.threads == 3
    after = read_proc(os.getpid())
    block = bytearray(64 << 20)  # zeroed: every page touched
    grown = read_proc(os.getpid()).rss_kb - after.rss_kb
    del block
    assert 60 << 10 <= grown <= 72 << 10
    assert read_proc(2**22 + 1) is None  # no such process (pid_max is at most 2^22)


def test_sampler_starts_a_series_per_lifetime():
    sampler = ProcSampler(every_s=0.01)
    sampler.track("me", os.getpid(), ready=True)
    sampler.sample_once()
    sampler.track("me", os.getpid())  # "restarted"
    sampler.sample_once()
    sampler.track("gone", 2**22 + 1)
    sampler.sample_once()
    sampler.stop()
    first, second, gone = sampler.series
    assert (first.lifetime, second.lifetime, gone.lifetime) == (0, 1, 0)
    assert (len(first.samples), len(second.samples), len(gone.samples)) == (1, 2, 0)
    assert first.ended is not None and first.ready is not None and second.ready is None
    assert gone.ended is not None


@dataclasses.dataclass
class Opts:  # the judged fields of SoakOptions
    warm_s: float = 10.0
    baseline_s: float = 10.0
    rss_limit: float = 1.5
    fd_tolerance: int = 16
    thread_tolerance: int = 16


def _series(name, lifetime, rss, fds, threads, n=100):
    samples = [dict(t=float(t), rss_kb=rss(t), fds=fds(t), threads=threads(t)) for t in range(n)]
    return dict(
        name=name, lifetime=lifetime, pid=1, started=0.0, ready=0.0, samples=samples, ended=99.0
    )


def _figures(*series, restarts=()):
    phase = dict(sent=10, wrong=0, lost=0, statuses={"UNAVAILABLE": 2})
    return dict(soak=phase, series=list(series), restarts=list(restarts))


def test_judge_tells_a_leak_from_a_plateau():
    flat = lambda t: 1000  # noqa: E731
    # a plateau reached late (threads made on demand) is not growth; a steady climb is
    plateau = _series("a", 0, lambda t: 100_000, flat, lambda t: 20 + min(t, 40) // 5)
    leak = _series("b", 0, lambda t: 100_000, lambda t: 100 + t, flat)
    fat = _series("c", 0, lambda t: 100_000 if t < 50 else 160_000, flat, flat)
    v = judge(_figures(plateau, leak, fat), Opts())
    lives = {x["name"]: x for x in v["lifetimes"]}
    assert lives["a"]["thread_growth"] == 0 and lives["b"]["fd_growth"] == 45
    assert lives["c"]["rss_ratio"] == 1.6 and lives["a"]["baseline_rss_mib"] == 97.7
    assert v["checks"]["fds"]["result"] == FAIL and "b#0" in v["checks"]["fds"]["detail"]
    assert v["checks"]["threads"]["result"] == PASS
    assert v["checks"]["rss"]["result"] == FAIL and "c#0" in v["checks"]["rss"]["detail"]
    assert v["checks"]["restarts"]["result"] == NOT_JUDGED and not v["passed"]
    ok = judge(
        _figures(plateau, restarts=[dict(replica=0, signal="SIGKILL", exit_code=-9)]), Opts()
    )
    assert ok["passed"], ok["checks"]
    # an undesigned status, a lost call, a SIGTERM that did not exit 0
    bad = _figures(
        plateau, restarts=[dict(replica=0, signal="SIGTERM", exit_code=1, overran_grace=False)]
    )
    bad["soak"] = dict(sent=10, wrong=0, lost=1, statuses={"INTERNAL": 1})
    v = judge(bad, Opts())
    assert [v["checks"][k]["result"] for k in ("lost", "statuses", "restarts")] == [FAIL] * 3
    # what a process does once told to stop (its drain) is not judged
    draining = _series("e", 0, lambda t: 100_000 if t < 90 else 200_000, flat, flat)
    draining["stopping"] = 90.0
    v = judge(_figures(draining), Opts())
    assert v["lifetimes"][0]["rss_ratio"] == 1.0 and v["lifetimes"][0]["samples"] == 90
    # too short to judge: said so, and the run does not pass
    short = _series("d", 0, lambda t: 1, flat, flat, n=15)
    v = judge(_figures(short), Opts())
    assert v["checks"]["rss"]["result"] == NOT_JUDGED and "too short" in v["lifetimes"][0]["why"]


def test_a_short_soak_with_restarts_and_vanishing_clients(rel_checkpoint, tmp_path):
    import jaxattn
    from jaxattn.bench.expect import build_expectations
    from jaxattn.bench.load_generator import LoadRequest
    from jaxattn.bench.soak import SoakOptions, run_soak

    mix = [LoadRequest("single", (s,), WHAT) for s in SENTENCES]
    mix.append(LoadRequest("stream6", SENTENCES, WHAT, weight=2.0))
    options = SoakOptions(
        duration_s=4.0,
        replicas=2,
        capacity_s=1.5,
        capacity_clients=4,
        workers=8,
        restart_every_s=1.5,
        until_restarts=2,
        cancel_share=0.3,
        vanish_every_s=2.5,
        timeout_s=30.0,
        grace_s=3.0,
        serve_args=("--max-batch", "4", "--batch-window-ms", "2"),
        sample_every_s=0.25,
        warm_s=0.5,
        baseline_s=1.0,
        drain_wait_s=30.0,
    )

    def warm(client) -> int:
        for n in (1, 2, 4):
            client.capture(list(SENTENCES[:n]), what=WHAT)
        return 3

    def expectations():  # `jaxattn serve`'s engine: default buckets, batches of <= 4
        return build_expectations(jaxattn.load(rel_checkpoint), mix, max_batch=4)

    f = run_soak(tmp_path, mix, expectations, options, model=rel_checkpoint, warm=warm)
    s, v = f["soak"], f["verdict"]
    assert s["wrong"] == 0 and s["lost"] == 0, (s["first_wrong"], s["first_lost"])
    assert f["capacity"]["wrong"] == 0 and f["capacity"]["lost"] == 0
    assert not s["undesigned_statuses"] and not f["capacity"]["undesigned_statuses"]
    assert f["capacity"]["requests_per_s"] > 0
    assert f["rate_per_s"] == pytest.approx(0.7 * f["capacity"]["requests_per_s"], abs=0.01)
    # every call sent ends once: right, cancelled, or a (designed) status
    assert s["sent"] == s["right"] + s["cancelled_by_caller"] + sum(s["statuses"].values())
    assert s["sent"] > 0 and s["right"] > 0 and s["cancelled_by_caller"] > 0
    assert f["checks"]["compared"] > 0
    assert f["checks"]["compared"] + f["checks"]["byte_identical"] >= s["examples_checked"]
    # one SIGTERM (drained, exit 0) and one SIGKILL, each replica listening again
    first, second = f["restarts"][:2]
    assert (first["replica"], first["signal"], first["exit_code"]) == (0, "SIGTERM", 0)
    assert (second["replica"], second["signal"], second["exit_code"]) == (1, "SIGKILL", -9)
    assert first["new_pid"] != first["pid"] and first["lifetime"] == 1
    assert [(x["exit_code"], x["overran_grace"]) for x in f["final_stops"]] == [(0, False)] * 2
    assert sum(f["vanishing_clients"].values()) >= 1
    assert all(k.startswith(("killed", "finished")) for k in f["vanishing_clients"])
    # a series per process lifetime, the restarted ones included, and the driver's
    names = {(x["name"], x["lifetime"]) for x in f["series"]}
    assert {
        ("replica0", 0),
        ("replica0", 1),
        ("replica1", 0),
        ("replica1", 1),
        ("driver", 0),
    } <= names
    for x in v["lifetimes"]:
        assert x["samples"] > 0 and x["rss_max_mib"] > 10, x
    for name in ("wrong", "lost", "statuses", "restarts"):
        assert v["checks"][name]["result"] == PASS, v["checks"][name]
    for name in ("rss", "fds", "threads"):
        assert v["checks"][name]["result"] in (PASS, FAIL, NOT_JUDGED)
    rows = (tmp_path / "samples.csv").read_text().splitlines()
    assert rows[0] == "name,lifetime,pid,t_s,rss_kb,fds,threads" and len(rows) > 20
    json.dumps(f)  # the report is JSON-ready
    md, chart = markdown(f), svg(f)
    assert "| wrong | pass |" in md and "| lost | pass |" in md
    assert chart.startswith("<svg") and chart.count("<polyline") >= 3 * len(f["series"]) - 3


def test_checker_compares_or_finds_the_same_bytes_in_every_dtype():
    import numpy as np

    from jaxattn.bench.expect import ExampleExpectation
    from jaxattn.bench.soak import Checker
    from jaxattn.capture import Capture
    from jaxattn.dtypes import OUTPUT_DTYPES

    ref = np.array([[0.25, 0.5], [1.0, 0.125]], np.float32)
    exp = ExampleExpectation(("a", "b"), None, (0,), (0,), {"attention": (ref,)})

    def cap(dtype, data, quant=None):
        t = {"attention": np.asarray(data, OUTPUT_DTYPES[dtype])}
        return Capture(
            tokens=["a", "b"],
            sentence_b_start=None,
            layers=(0,),
            heads=(0,),
            dtype=dtype,
            tensors=t,
            quantization={"attention": quant} if quant else {},
        )

    checker = Checker([[exp]])
    right = {
        "float32": cap("float32", ref),
        "float16": cap("float16", ref),
        "bfloat16": cap("bfloat16", ref),  # no buffer format of its own: hashed as bytes
        "uint8": cap("uint8", np.round((ref - 0.125) / (0.875 / 255)), (0.875 / 255, 0.125)),
    }
    for dtype, c in right.items():
        assert checker.example(0, 0, c) is None, dtype
        assert checker.example(0, 0, c) is None, dtype  # the second time: same bytes
    assert (checker.compared, checker.identical) == (4, 4)
    off = ref.copy()
    off[1, 1] = np.nextafter(off[1, 1], 1)  # one bit off in float32
    assert "outside the documented error" in checker.example(0, 0, cap("float32", off))
    assert "more examples" in checker.example(0, 1, right["float32"])
    assert checker.answer(0, []) == "0 examples answered, 1 asked"
