"""Input files' bytes as text: the byte-order mark some editors (Windows Notepad,
Excel's CSV UTF-8) put before a UTF-8 file's first line, and a line decoded with its
place named where it is not UTF-8. Every input format reads its lines through these."""

from __future__ import annotations

from jaxattn.errors import InputError

# Not part of the first record: passed over in every format and in format sniffing.
UTF8_BOM = b"\xef\xbb\xbf"


def decode_line(data: bytes, line: int) -> str:
    """`data` (line `line` of an input file) as text; InputError naming the line and
    byte where it is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(line, f"invalid UTF-8 at byte {e.start + 1}") from None
