"""The shard plan: records -> shards -> processes (pure Python, no model)."""

from __future__ import annotations

import hashlib

import pytest

from jaxattn.dump.sharding import owner, plan_shards
from jaxattn.errors import UsageError


def _records(path, fmt=None, **kw):
    plan = plan_shards(path, fmt=fmt, **kw)
    return plan, [r for shard in sorted(plan.shards) for r in plan.shards[shard]]


def test_plan_identifies_the_input(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"one\n\n  \ntwo\tthree\r\nfour\tfive\tsix\n\xffbad\n")
    plan, records = _records(path)
    assert plan.info.format == "text" and plan.info.records == 4
    assert plan.info.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [r.line for r in records] == [1, 4, 5, 6]  # unparsed: bad records keep their place


def test_a_limited_plan_fingerprints_only_the_records_it_takes(tmp_path):
    """--limit 2: the bytes up to the 2nd record; what follows may change or grow."""
    head = b"one\n\ntwo\n"
    want = hashlib.sha256(head).hexdigest()
    for tail in (b"", b"\n", b"three\n", b"THREE\nfour\n", b"\n\nthree"):
        path = tmp_path / "in.txt"
        path.write_bytes(head + tail)
        assert plan_shards(path, limit=2).info.sha256 == want, tail
    path.write_bytes(b"one\n\ntwo\n\n")  # fewer records than the limit: the whole file
    assert plan_shards(path, limit=3).info.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    conllu = tmp_path / "in.conllu"
    sentence = b"# c\n1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n\n"
    conllu.write_bytes(sentence + sentence.replace(b"\ta\t", b"\tb\t"))
    got = plan_shards(conllu, limit=1).info.sha256
    assert got == hashlib.sha256(sentence).hexdigest()


def test_processes_share_the_shards_disjointly(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("".join(f"line {i}\n" for i in range(23)))
    single, records = _records(path, shard_size=5)
    assert single.num_shards == 5 and single.records(4) == (20, 23)
    seen = []
    for p in range(3):
        plan, mine = _records(path, shard_size=5, process_index=p, process_count=3)
        assert set(plan.shards) == {k for k in range(5) if owner(k, 3) == p}
        seen += [r.index for r in mine]
    assert sorted(seen) == [r.index for r in records] == list(range(23))


def test_plan_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no input file"):
        plan_shards(tmp_path / "missing.txt")
    (tmp_path / "x.txt").write_text("a\n")
    with pytest.raises(UsageError, match="shard-size"):
        plan_shards(tmp_path / "x.txt", shard_size=0)
    with pytest.raises(UsageError, match="unknown input format"):
        plan_shards(tmp_path / "x.txt", fmt="csv")
