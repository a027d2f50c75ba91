"""The one progress line (jaxattn.progress)."""

from __future__ import annotations

import io

from jaxattn.progress import Progress


def test_progress_line_has_rates_bytes_and_eta():
    bar = Progress(100, "dump p1/2", stream=io.StringIO())
    bar.start -= 10.0  # as if 10 s had passed
    bar.update(40, examples=38, tokens=760, bytes=2_500_000)
    line = bar.line()
    assert line.startswith("dump p1/2 40/100 [")
    assert "40%" in line and "3.8 ex/s" in line and "76.0 tok/s" in line
    assert "2.5 MB written" in line and "eta 15s" in line
    bar.update(60)
    assert bar.line().endswith("eta 0s")


def test_progress_writes_lines_to_a_log_and_nothing_when_quiet():
    log = io.StringIO()
    bar = Progress(2, "dump", stream=log)
    bar.update(1)  # the first update draws at once
    bar.update(1)  # a further tenth of the total: drawn to a log
    bar.close()  # the final state was drawn: no repeat
    lines = log.getvalue().splitlines()
    assert len(lines) == 2 and lines[-1].startswith("dump 2/2 [")
    quiet = io.StringIO()
    bar = Progress(2, "dump", enabled=False, stream=quiet)
    bar.update(2)
    bar.close()
    assert quiet.getvalue() == ""


def test_progress_line_leaves_out_what_is_not_counted():
    bar = Progress(10, "analyze", stream=io.StringIO())
    bar.start -= 2.0
    bar.update(4)
    line = bar.line()
    assert "2.0 ex/s" in line and "tok/s" not in line and "written" not in line


def test_a_log_gets_a_line_per_tenth_not_per_update():
    log = io.StringIO()
    bar = Progress(1000, "analyze", stream=log)
    for _ in range(1000):
        bar.update(1)
    bar.close()
    lines = log.getvalue().splitlines()
    assert len(lines) == 11 and lines[-1].startswith("analyze 1000/1000 [")
