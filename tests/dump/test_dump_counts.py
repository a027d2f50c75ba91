"""The dump's final summary line, and how a store's identity is compared."""

from __future__ import annotations

from jaxattn.dump.counts import Counts, summary
from jaxattn.progress import human_bytes


def test_summary_line():
    """Every record left out is skipped (bad ones under --on-error skip, too long ones
    under --too-long skip), in words: a count of one is singular."""
    counts = Counts(examples=10, skipped=1, truncated=2, errors=3, tokens=99, bytes=1_234_567)
    line = summary("dump", counts, seconds=2.0, shards=3, resumed=1, stored=1_000_000)
    assert line == (
        "dump: 10 examples in 3 shards (1 already done), 4 skipped (3 bad records, 1 too long), "
        "2 truncated, 1.2 MB written (1.0 MB on disk), 2.0s (5.0 ex/s)"
    )
    one = Counts(examples=1, errors=1, bytes=1000)
    assert summary("dump", one, seconds=1.0, shards=1, resumed=0) == (
        "dump: 1 example in 1 shard (0 already done), 1 skipped (1 bad record), 0 truncated, "
        "1.0 kB written, 1.0s (1.0 ex/s)"
    )
    assert ", 0 skipped, 0 truncated, " in summary(
        "dump", Counts(), seconds=0.0, shards=2, resumed=2
    )
    assert human_bytes(999) == "999 B" and human_bytes(1_500) == "1.5 kB"


def test_a_store_without_precision_meant_highest():
    """Stores of jaxattn 0.1 record no precision; they were computed at highest."""
    from jaxattn.store.metadata import differences

    old = {"spec": {"dtype": "float32"}}
    assert differences(old, {"spec": {"dtype": "float32", "precision": "highest"}}) == []
    assert differences(old, {"spec": {"dtype": "float32", "precision": "bf16"}}) != []
