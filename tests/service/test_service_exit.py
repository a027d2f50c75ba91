"""Commands end cleanly: no traceback at exit, and a server killed mid-call is one clear error.

A real `jaxattn serve` process (so that a kill is a real kill), shared by the tests.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from service_support import SENTENCES

from jaxattn.client import AttentionClient, AttentionServiceError

JAXATTN = Path(sys.executable).with_name("jaxattn")
ENV = dict(os.environ, JAXATTN_TOKEN="", PYTHONUNBUFFERED="1")


def start_server(checkpoint: Path, cwd: Path) -> tuple[subprocess.Popen, str]:
    """`jaxattn serve` on a free port; (process, address) once it listens."""
    proc = subprocess.Popen(
        [str(JAXATTN), "serve", "--model", str(checkpoint), "--port", "0", "--grace", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=ENV,
        cwd=cwd,
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    try:
        line = lines.get(timeout=90)
    except queue.Empty:
        proc.kill()
        pytest.fail("jaxattn serve did not start within 90 s")
    assert "listening on 127.0.0.1:" in line, line
    return proc, "127.0.0.1:" + line.split("listening on 127.0.0.1:")[1].split()[0]


@pytest.fixture(scope="module")
def serving(svc_checkpoint, tmp_path_factory):
    """(process, address) of one server for the module; the last test kills it."""
    proc, address = start_server(svc_checkpoint, tmp_path_factory.mktemp("exit"))
    yield proc, address
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.fixture
def server(serving):
    if serving[0].poll() is not None:
        pytest.skip("the module's server was killed by an earlier test")
    return serving[1]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(JAXATTN), *args], capture_output=True, text=True, env=ENV, timeout=120
    )


def test_capture_through_a_server_exits_without_a_traceback(server, tmp_path):
    done = run_cli(
        "capture", "the cat sat on the mat", "--server", server, "--out", str(tmp_path / "cap.npz")
    )
    assert done.returncode == 0, done.stderr
    assert "[CLS] the cat sat on the mat [SEP]" in done.stdout
    assert "Traceback" not in done.stderr and "Event loop" not in done.stderr, done.stderr


def test_a_refused_capture_is_one_line_without_a_traceback(server):
    done = run_cli("capture", "the cat", "--server", server, "--layers", "7")
    assert done.returncode != 0  # the code a refusal gets is the CLI's (jaxattn.errors)
    assert "Traceback" not in done.stderr and "Event loop" not in done.stderr, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if "INVALID_ARGUMENT" in x]
    assert "layers index 7" in line and server in line


def test_a_server_killed_mid_call_is_one_unavailable_error_naming_it(serving):
    proc, address = serving  # the module's last test: it kills the server
    errors: list[BaseException] = []

    def call():
        # Calls back to back until one fails: the kill lands in one of them, however
        # fast a call is (the first compiles a new shape, the rest run it).
        deadline = time.monotonic() + 25
        try:
            with AttentionClient(address, timeout=30, retries=1, backoff=(0.05, 0.1)) as c:
                while time.monotonic() < deadline:
                    c.capture(list(SENTENCES) * 20)
        except BaseException as e:  # noqa: BLE001 (what the caller would see)
            errors.append(e)

    caller = threading.Thread(target=call)
    caller.start()
    time.sleep(1.0)  # the call is in and computing
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    caller.join(30)
    assert not caller.is_alive()
    (error,) = errors
    assert isinstance(error, AttentionServiceError), repr(error)
    assert error.code == grpc.StatusCode.UNAVAILABLE and error.address == address
    assert address in str(error)
    print(error)
