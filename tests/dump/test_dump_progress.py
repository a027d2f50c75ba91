"""The progress line and the summary line."""

from __future__ import annotations

import io

from jaxattn.dump.progress import Counts, Progress, human_bytes, summary


def test_progress_line_has_rates_bytes_and_eta():
    bar = Progress(100, "dump p1/2", stream=io.StringIO())
    bar.start -= 10.0  # as if 10 s had passed
    bar.update(records=40, examples=38, tokens=760, bytes=2_500_000)
    line = bar.line()
    assert line.startswith("dump p1/2 40/100 [")
    assert "40%" in line and "3.8 ex/s" in line and "76.0 tok/s" in line
    assert "2.5 MB written" in line and "eta 15s" in line
    bar.update(records=60)
    assert bar.line().endswith("eta 0s")


def test_progress_writes_lines_to_a_log_and_nothing_when_quiet():
    log = io.StringIO()
    bar = Progress(2, "dump", stream=log)
    bar.update(records=1, examples=1)  # the first update draws at once
    bar.update(records=1, examples=1)  # within 30 s: not drawn to a log
    bar.close()  # the final state
    lines = log.getvalue().splitlines()
    assert len(lines) == 2 and lines[-1].startswith("dump 2/2 [")
    quiet = io.StringIO()
    bar = Progress(2, "dump", enabled=False, stream=quiet)
    bar.update(records=2)
    bar.close()
    assert quiet.getvalue() == ""


def test_summary_line():
    counts = Counts(examples=10, skipped=1, truncated=2, errors=3, tokens=99, bytes=1_234_567)
    line = summary("dump", counts, seconds=2.0, shards=3, resumed=1, stored=1_000_000)
    assert line == (
        "dump: 10 examples in 3 shards (1 already done), 1 skipped, 2 truncated, 3 errors, "
        "1.2 MB written (1.0 MB on disk), 2.0s (5.0 ex/s)"
    )
    assert human_bytes(999) == "999 B" and human_bytes(1_500) == "1.5 kB"
