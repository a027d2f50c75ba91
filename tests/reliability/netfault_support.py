"""Helpers of the faulty-network tests (test_rel_netfault*.py): the namespaces, a server in one.

Imported by name (`from netfault_support import ...`): tests/reliability is on sys.path.
"""

from __future__ import annotations

import json
import os
import pickle
import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from jaxattn.bench.fault_network import FaultyNetwork, NetworkUnavailable

JAXATTN = Path(sys.executable).with_name("jaxattn")
CLIENT = Path(__file__).with_name("netfault_load.py")  # the client side, run in its namespace


def faulty_network() -> FaultyNetwork:
    """An open FaultyNetwork, or the test skipped saying why this machine cannot make one."""
    try:
        return FaultyNetwork().open()
    except NetworkUnavailable as e:
        pytest.skip(f"no faulty network on this machine: {e}")


def start_server(net: FaultyNetwork, checkpoint: Path, log: Path):
    """`jaxattn serve` in the server namespace, on its veth address, port 0; (process, lines)."""
    with open(log, "wb") as err:
        proc = net.popen(
            "server",
            [str(JAXATTN), "serve", "--model", str(checkpoint), "--host", net.server_ip]
            + ["--port", "0", "--max-batch", "1", "--batch-window-ms", "2"],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=dict(os.environ, JAXATTN_TOKEN="", PYTHONUNBUFFERED="1"),
        )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    return proc, lines


def server_port(net: FaultyNetwork, lines: queue.Queue, log: Path, timeout: float = 120) -> int:
    """The port a `start_server` server listens on, once it says so (the test fails if not)."""
    try:
        line = lines.get(timeout=timeout)
    except queue.Empty:
        pytest.fail(f"jaxattn serve did not start: {log.read_text()}")
    assert f"listening on {net.server_ip}:" in line, line
    return int(line.split(f"listening on {net.server_ip}:")[1].split()[0])


def run_client(net: FaultyNetwork, plan: dict, workdir: Path, timeout: float = 180) -> dict:
    """netfault_load.py in the client namespace with `plan`; its report (load, proxy)."""
    (workdir / "plan.pickle").write_bytes(pickle.dumps(plan))
    client = net.popen(
        "client",
        [sys.executable, str(CLIENT), str(workdir / "plan.pickle")],
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = client.communicate(timeout=timeout)
    return json.loads(out.strip().splitlines()[-1])
