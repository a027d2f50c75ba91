"""`read_records` on hostile JSONL files ({"text", "text_b", "id"} per line)."""

from __future__ import annotations

from inputs_target import DESIGNED, read

__all__ = ["DESIGNED"]
TOKENS = (b'"text"', b'"text_b"', b'"id"', b"[[[[[[[[", b"{", b"null", b"true", b"1e999")
TOKENS += (b'"\\ud800"', b"\n")


def seeds() -> list[bytes]:
    return [
        b'{"text": "I went to the store.", "id": "a1"}\n{"text": "x", "text_b": "y", "id": 7}\n',
        b'{"text": "The cat sat."}\n\n',
    ]


def one_input(data: bytes) -> None:
    read(data, ".jsonl", "jsonl")
