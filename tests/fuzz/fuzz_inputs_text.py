"""`read_records` on hostile text files (one example per line, ``A ||| B`` pairs), with the
format detected from the content (`detect_format`)."""

from __future__ import annotations

from inputs_target import DESIGNED, read

__all__ = ["DESIGNED"]
TOKENS = (b"|||", b"\t", b"\r\n", b"\n\n", b"#", b"{", b"\xef\xbb\xbf")


def seeds() -> list[bytes]:
    return [
        b"I went to the store.\nThe cat sat.\n",
        b"I went to the store. ||| At the store, I bought fresh strawberries.\n",
        b"a\tb\n\n  c  \n",
    ]


def one_input(data: bytes) -> None:
    read(data, ".txt", None)
