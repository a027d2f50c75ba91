"""Raw bytes on the server's port: garbage, truncated HTTP/2 frames, half-open connections."""

from __future__ import annotations

import random
import socket
import struct
import time

import pytest
from rel_support import SENTENCES, WHAT, assert_right

from jaxattn.client import AttentionClient

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS, HEADERS, GOAWAY = 0x4, 0x1, 0x7


def frame(kind: int, flags: int, stream: int, payload: bytes, length: int | None = None) -> bytes:
    """An HTTP/2 frame; `length` may lie about the payload."""
    n = len(payload) if length is None else length
    return struct.pack(">I", n)[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5)


def read_until_closed(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """Everything the server sends until it closes the connection (fails if it never does)."""
    sock.settimeout(timeout)
    data = b""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk
    raise AssertionError(f"the server kept the connection open (got {len(data)} bytes)")


def goaway_codes(data: bytes) -> list[int]:
    """Error codes of the GOAWAY frames in a server's byte stream."""
    codes, pos = [], 0
    while pos + 9 <= len(data):
        n = int.from_bytes(data[pos : pos + 3], "big")
        if data[pos + 3] == GOAWAY and pos + 9 + n <= len(data):
            codes.append(int.from_bytes(data[pos + 13 : pos + 17], "big"))
        pos += 9 + n
    return codes


NOISE = random.Random(7)  # fixed bytes: a failure here reproduces

GARBAGE = {
    "random bytes": NOISE.randbytes(4096),
    "HTTP/1.1": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "TLS hello on plaintext": bytes.fromhex("16030100a5010000a10303") + NOISE.randbytes(160),
    "almost a preface": b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n" + NOISE.randbytes(64),
}


@pytest.mark.parametrize("name", GARBAGE)
def test_garbage_on_the_port_closes_that_connection_only(served, expected, name):
    _, address = served
    with connect(address) as sock:
        sock.sendall(GARBAGE[name])
        read_until_closed(sock)
    with AttentionClient(address, timeout=30) as client:
        assert_right(client.capture(list(SENTENCES[:2]), what=WHAT), SENTENCES[:2], expected)


def test_protocol_errors_close_the_connection(served):
    _, address = served
    settings = frame(SETTINGS, 0, 0, b"")
    cases = {
        # HPACK decoding errors are connection errors (RFC 7541 s2.3.3, s6.3; RFC 9113 s4.3).
        # Random bytes are not: they may decode into a bad header, which only resets the stream.
        "HPACK index 0": PREFACE + settings + frame(HEADERS, 0x4, 1, b"\x80"),
        "HPACK index past the tables": PREFACE
        + settings
        + frame(HEADERS, 0x4, 1, b"\xff\xff\xff\xff\x0f"),
        "HPACK table size over SETTINGS": PREFACE
        + settings
        + frame(HEADERS, 0x4, 1, b"\x3f\xff\xff\xff\xff\x0f"),
        "frame over the size limit": PREFACE + settings + frame(0x0, 0, 1, b"", (1 << 24) - 1),
        "SETTINGS on a stream": PREFACE + frame(SETTINGS, 0, 3, b""),
    }
    for name, data in cases.items():
        with connect(address) as sock:
            sock.sendall(data)
            codes = goaway_codes(read_until_closed(sock))  # closed, with or without GOAWAY
            assert all(c != 0 for c in codes), (name, codes)  # any GOAWAY names an error


def test_truncated_frames_and_half_open_connections_do_not_block_anyone(served, expected):
    _, address = served
    settings = frame(SETTINGS, 0, 0, b"")
    truncated = [
        PREFACE[:10],  # a cut preface
        PREFACE + settings[:5],  # a cut frame header
        PREFACE + frame(SETTINGS, 0, 0, b"\0\3", 6),  # SETTINGS cut inside its payload
        PREFACE + settings + frame(HEADERS, 0x4, 1, b"\x82\x86", 100),  # HEADERS cut short
    ]
    held = []
    for data in truncated * 10:  # 40 connections left hanging mid-frame
        sock = connect(address)
        sock.sendall(data)
        held.append(sock)
    try:
        with AttentionClient(address, timeout=30) as client:
            start = time.monotonic()
            caps = client.capture(list(SENTENCES), what=WHAT)
            assert time.monotonic() - start < 10
            assert_right(caps, SENTENCES, expected)
        for sock in held[:4]:  # and the truncated ones may simply vanish
            sock.close()
    finally:
        for sock in held:
            sock.close()
    with AttentionClient(address, timeout=30) as client:
        assert_right(client.capture(list(SENTENCES), what=WHAT), SENTENCES, expected)
