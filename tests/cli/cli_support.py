"""What the CLI tests share: reading a command's one-line error."""

from __future__ import annotations


def one_error(capsys, command: str) -> str:
    """The command's one error line on stderr (asserting there is one, and no traceback)."""
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert "Traceback" not in out + err and len(lines) == 1, err
    assert lines[0].startswith(f"jaxattn {command}: error: ")
    return lines[0]
