"""Outputs are written whole or not at all: a failed write keeps the previous file."""

from __future__ import annotations

import errno
import os
import stat

import numpy as np
import pytest
from capture_samples import make

from jaxattn import Capture
from jaxattn.outfile import replacing, write_text


def _full_disk(*args, **kwargs):
    f = args[0]
    f.write(b"half an archive")
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_failed_write_keeps_the_old_file_and_names_it(tmp_path):
    path = tmp_path / "out.json"
    write_text(path, "old")
    with pytest.raises(OSError) as err:
        with replacing(path) as f:
            f.write(b"new, half")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(path)
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["out.json"]
    with pytest.raises(KeyboardInterrupt), replacing(tmp_path / "new.txt", "w") as f:
        f.write("half")
        raise KeyboardInterrupt
    assert os.listdir(tmp_path) == ["out.json"]  # no new file, no temporary left


def test_a_written_file_has_the_usual_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        write_text(tmp_path / "a.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644


def test_capture_save_over_a_capture_fails_whole(tmp_path, monkeypatch):
    path = tmp_path / "c.npz"
    make("float32").save(path)
    monkeypatch.setattr(np, "savez", _full_disk)
    with pytest.raises(OSError, match="No space left"):
        make("uint8").save(path)
    assert Capture.load(path).dtype == "float32"  # the old capture, intact
    assert os.listdir(tmp_path) == ["c.npz"]


def test_what_is_not_a_plain_file_of_its_own_is_written_in_place(tmp_path):
    """A symlink is written through, hard links all see the new content, a device or
    pipe is never replaced by a file (a FIFO stands in for /dev/null here)."""
    from jaxattn.outfile import _in_place

    real = tmp_path / "real.json"
    real.write_text("old")
    (tmp_path / "link.json").symlink_to(real)
    write_text(tmp_path / "link.json", "new")
    assert (tmp_path / "link.json").is_symlink() and real.read_text() == "new"
    os.link(real, tmp_path / "other.json")
    write_text(real, "newer")
    assert (tmp_path / "other.json").read_text() == "newer"
    os.mkfifo(tmp_path / "pipe")
    assert _in_place(str(tmp_path / "pipe")) and not _in_place(str(tmp_path / "absent"))


def test_a_replaced_file_keeps_its_mode_and_long_names_work(tmp_path):
    private = tmp_path / "private.npz"
    private.write_text("old")
    private.chmod(0o600)
    write_text(private, "new")
    assert stat.S_IMODE(private.stat().st_mode) == 0o600 and private.read_text() == "new"
    long = tmp_path / ("x" * 250)
    write_text(long, "fits")
    assert long.read_text() == "fits" and sorted(os.listdir(tmp_path)) == sorted(
        ["private.npz", "x" * 250]
    )
