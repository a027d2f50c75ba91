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
