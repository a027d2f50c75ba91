"""jaxattn.bench.fault_proxy on loopback: bytes intact, resets, stalls, partitions.

An echo server behind the proxy; every wait is on an event (the proxy's counts,
the echo's own) or a socket timeout the test sets, never a sleep.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

from jaxattn.bench.fault_proxy import FaultProxy, Faults, Leg


class Echo:
    """A TCP echo server on loopback; `errors` lists what its connections ended with."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.errors: list[str] = []
        self.ended = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.listener.accept()
                threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        try:
            while data := conn.recv(65536):
                conn.sendall(data)
        except OSError as e:
            self.errors.append(type(e).__name__)
        conn.close()
        self.ended.set()


@pytest.fixture
def echo():
    server = Echo()
    yield server
    server.listener.close()


def connect(proxy: FaultProxy, timeout: float = 10.0) -> socket.socket:
    host, port = proxy.address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=timeout)


def receive(sock: socket.socket, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        data = sock.recv(65536)
        assert data, f"connection closed after {len(got)} of {n} bytes"
        got += data
    return bytes(got)


def test_bytes_cross_intact_and_in_order_under_delay_and_jitter(echo):
    data = os.urandom(3 << 20)
    faults = Faults(up=Leg(0.003, 0.003), down=Leg(0.001, 0.001), seed=1)
    with FaultProxy(echo.address, faults) as proxy, connect(proxy) as sock:
        threading.Thread(target=sock.sendall, args=(data,), daemon=True).start()
        assert receive(sock, len(data)) == data
        assert proxy.wait_for("bytes_down", len(data))
        assert proxy.snapshot()["bytes_up"] == len(data)


def test_a_reset_after_n_bytes_is_a_reset_for_both_peers(echo):
    with FaultProxy(echo.address, Faults(reset_after=(1000, 1000))) as proxy, connect(proxy) as s:
        s.sendall(b"x" * 4000)
        with pytest.raises(ConnectionResetError):
            while s.recv(65536):
                pass
        assert proxy.wait_for("resets", 1)
        assert echo.ended.wait(10)
        # ECONNRESET, or EPIPE when the echo's send comes after the reset arrived: a reset both
        assert echo.errors in (["ConnectionResetError"], ["BrokenPipeError"]), echo.errors


def test_a_stall_holds_every_byte_for_its_time_then_delivers_it(echo):
    faults = Faults(stall_after=(100, 100), stall_s=1.5)
    with FaultProxy(echo.address, faults) as proxy, connect(proxy) as sock:
        sock.sendall(b"a" * 200)  # delivered up, then the connection stalls
        assert proxy.wait_for("stalls", 1)
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):  # the echo is held
            sock.recv(65536)
        sock.settimeout(10)
        assert receive(sock, 200) == b"a" * 200


def test_a_partition_holds_old_and_new_connections_until_it_heals(echo):
    with FaultProxy(echo.address) as proxy, connect(proxy) as old:
        old.sendall(b"before")
        assert receive(old, 6) == b"before"
        proxy.partition(1.5)
        assert proxy.wait_for("partitions", 1)
        with connect(proxy) as new:  # accepted, but not connected through
            for sock in (old, new):
                sock.sendall(b"during")
                sock.settimeout(0.3)
                with pytest.raises(TimeoutError):
                    sock.recv(65536)
            assert proxy.wait_for("partitions_healed", 1)
            for sock in (old, new):
                sock.settimeout(10)
                assert receive(sock, 6) == b"during"
        assert proxy.snapshot()["connections"] == 2


def test_faults_wait_until_armed(echo):
    with FaultProxy(echo.address, Faults(reset_after=(10, 10)), armed=False) as proxy:
        with connect(proxy) as sock:
            sock.sendall(b"y" * 100)
            assert receive(sock, 100) == b"y" * 100  # calm: no reset
            assert proxy.wait_for("bytes_down", 100)
            proxy.arm()
            sock.sendall(b"z" * 4)  # 8 of its 10 bytes, counted from arming
            assert receive(sock, 4) == b"z" * 4
            sock.sendall(b"z")  # 9, and its echo 10
            with pytest.raises(ConnectionResetError):
                while sock.recv(65536):
                    pass
        assert proxy.snapshot()["resets"] == 1


def test_the_command_line_proxy_partitions_on_sigusr2_and_reports_at_sigterm(echo):
    proc = subprocess.Popen(
        [sys.executable, "-m", "jaxattn.bench.fault_proxy", "--target", echo.address]
        + ["--delay-ms", "1", "--partition-s", "1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), line
        host, port = line.split()[-1].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"ping")
            assert receive(sock, 4) == b"ping"
            proc.send_signal(signal.SIGUSR2)
            assert proc.stdout.readline() == "partition for 1 s\n"
            sock.settimeout(0.3)
            sock.sendall(b"held")
            with pytest.raises(TimeoutError):
                sock.recv(65536)
            sock.settimeout(10)
            assert receive(sock, 4) == b"held"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    counts = json.loads(out.strip().splitlines()[-1])
    assert counts["connections"] == 1 and counts["partitions"] == 1
    assert counts["bytes_up"] == counts["bytes_down"] == 8
