"""`jaxattn serve` as a real process: it serves, and SIGTERM drains in-flight calls."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from service_support import SENTENCES, WHAT

from jaxattn.client import AttentionClient, AttentionServiceError

JAXATTN = Path(sys.executable).with_name("jaxattn")


def read_lines(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)


def launch(checkpoint: Path, tmp_path: Path, *extra: str):
    """Starts `jaxattn serve` on a free port: (process, address, stderr path) once it listens."""
    stderr = tmp_path / "serve.log"
    env = dict(os.environ, JAXATTN_TOKEN="", PYTHONUNBUFFERED="1")
    with open(stderr, "wb") as err:
        proc = subprocess.Popen(
            [
                str(JAXATTN),
                "serve",
                "--model",
                str(checkpoint),
                "--port",
                "0",
                "--grace",
                "60",
                "--batch-window-ms",
                "2",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
            cwd=tmp_path,
        )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=read_lines, args=(proc.stdout, lines), daemon=True).start()
    try:
        line = lines.get(timeout=90)
    except queue.Empty:
        proc.kill()
        pytest.fail(f"jaxattn serve did not start: {stderr.read_text()[-2000:]}")
    assert "listening on 127.0.0.1:" in line, line
    port = int(line.split("listening on 127.0.0.1:")[1].split()[0])
    if "--metrics-port" in extra:  # the next line says where
        line = lines.get(timeout=10)
        assert "metrics on http://127.0.0.1:" in line, line
        proc.metrics_url = line.split()[-1]
    return proc, f"127.0.0.1:{port}", stderr


def metric(url: str, name: str, **labels) -> float:
    """One sample's value, scraped from /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as answer:
        families = text_string_to_metric_families(answer.read().decode())
        found = [
            s.value for f in families for s in f.samples if (s.name, s.labels) == (name, labels)
        ]
    assert found, f"{name}{labels} is not in {url}"
    return found[0]


def test_warmup_compiles_before_listening_and_a_bad_quantity_is_refused(svc_checkpoint, tmp_path):
    proc, address, stderr = launch(
        svc_checkpoint,
        tmp_path,
        "--warmup",
        "attention",
        "--warmup",
        "attention,keys",
        "--warmup-sizes",
        "largest",
        "--metrics-port",
        "0",
    )
    try:
        log = stderr.read_text()
        # buckets 8..64 and the model's limit, 67: one shape each, for each kind of request
        assert "warmed up attention: 9 shapes (largest sizes) in" in log, log
        assert "warmed up attention,keys: 9 shapes (largest sizes) in" in log, log
        assert "malloc arenas: at most " in log, log  # --malloc-arenas' default, or the env's
        assert metric(proc.metrics_url, "jaxattn_compiled_shapes_total") == 18
        with AttentionClient(address, timeout=60) as client:
            (cap,) = client.capture([SENTENCES[0]], what=["attention"])
        assert cap.attention.shape[:2] == (3, 3)
        ok = dict(method="Capture", code="OK")
        assert metric(proc.metrics_url, "jaxattn_requests_total", **ok) == 1
    finally:
        proc.kill()
        proc.wait()
    for flags, says in [
        (["--warmup", "attention,atention"], "--warmup: unknown quantity 'atention': valid"),
        (
            ["--warmup", "scores_c2c"],
            "--warmup scores_c2c: quantity 'scores_c2c' is not computed by this model",
        ),
        (["--warmup-sizes", "largest"], "--warmup-sizes needs --warmup WHAT"),
    ]:
        bad = subprocess.run(
            [str(JAXATTN), "serve", "--model", str(svc_checkpoint), "--port", "0", *flags],
            capture_output=True,
            text=True,
            env=dict(os.environ, JAXATTN_TOKEN=""),
            timeout=120,
        )
        assert bad.returncode == 2 and "listening" not in bad.stdout, flags
        (line,) = bad.stderr.strip().splitlines()
        assert says in line and "Traceback" not in bad.stderr, line


def test_sigterm_while_warming_up_exits_without_listening(svc_checkpoint, tmp_path):
    stderr = tmp_path / "serve.log"
    with open(stderr, "wb") as err:
        proc = subprocess.Popen(
            [
                str(JAXATTN),
                "serve",
                "--model",
                str(svc_checkpoint),
                "--port",
                "0",
                "--warmup",
                "attention",
                "--warmup",
                "attention,queries,keys,fx_norm",
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=dict(os.environ, JAXATTN_TOKEN="", PYTHONUNBUFFERED="1"),
        )
    try:
        deadline = time.monotonic() + 90
        while "warming up attention (all sizes)" not in stderr.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, stderr.read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0  # one shape's compile, not the whole warmup
    finally:
        proc.kill()
    log = stderr.read_text()
    assert "stopped while warming up attention: not listening" in log, log
    assert "listening on" not in proc.stdout.read()


def test_sigterm_finishes_in_flight_streams_refuses_new_calls_and_exits(svc_checkpoint, tmp_path):
    # A call certain to be in flight, whatever the machine's speed: ~80 MB of results
    # (256 texts at the model's 67 positions), far past the call's 1 MiB buffer and the
    # transport's windows, its client holding all but the first capture unread.
    proc, address, stderr = launch(svc_checkpoint, tmp_path, "--request-buffer-mib", "1")
    try:
        texts = [" ".join(["the quick brown fox jumps over the lazy dog"] * 8)] * 256
        with AttentionClient(address, timeout=60) as client:
            assert client.model_info().layers == 3
            stream = iter(client.stream(texts, what=WHAT, too_long="truncate"))
            results = [next(stream)]  # the call is in: the server waits for this reader
            proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 30
            while "draining" not in stderr.read_text():
                assert time.monotonic() < deadline, stderr.read_text()
                time.sleep(0.05)
            with AttentionClient(address, timeout=5, retries=0) as late:
                with pytest.raises(AttentionServiceError) as info:
                    late.capture(SENTENCES[:1], what=WHAT)
                assert info.value.code == grpc.StatusCode.UNAVAILABLE
            results += list(stream)  # the in-flight call finishes after SIGTERM
        assert [c.tokens[0] for c in results] == ["[CLS]"] * len(texts)
        assert results[0].attention.shape == (3, 3, 67, 67)  # the model's positions, all
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = stderr.read_text()
    assert "draining" in log and "stopped" in log
    (line,) = [x for x in log.splitlines() if f"status=OK texts={len(texts)}" in x]
    # It was in flight when SIGTERM came: it ended after the drain began.
    assert log.index("draining") < log.index(line)


def test_serve_names_the_shape_warmup_takes(svc_checkpoint):
    from service import ServerOptions
    from service import serve as run_server

    for bad in ["attention", ("attention", "keys"), [("attention",), "keys"]]:
        with pytest.raises(TypeError, match=r"warmup must be a sequence of tuples of quantity"):
            run_server(svc_checkpoint, "127.0.0.1:0", ServerOptions(), warmup=bad)
