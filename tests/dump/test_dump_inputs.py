"""Input records and the shard plan: pure Python, no model."""

from __future__ import annotations

import hashlib

import pytest

from jaxattn.dump.inputs import InputError, RawRecord, detect_format, parse
from jaxattn.dump.plan import owner, plan_input

CONLLU = """# newdoc id = d1
# sent_id = s1
# text = I went.
1\tI\tI\tPRON\t_\t_\t2\tnsubj\t_\t_
2-3\twent.\t_\t_\t_\t_\t_\t_\t_\t_
2\twent\tgo\tVERB\t_\t_\t0\troot\t_\t_
3\t.\t.\tPUNCT\t_\t_\t2\tpunct\t_\t_

# sent_id = s2
1\tHello\thello\tINTJ\t_\t_\t0\troot\t_\t_
3\tbad\tbad\tADJ\t_\t_\t1\tamod\t_\t_

1\tBye\tbye\tINTJ\t_\t_\t0\troot\t_\t_
"""


def _records(path, fmt=None, **kw):
    plan = plan_input(path, fmt=fmt, **kw)
    return plan, [r for shard in sorted(plan.shards) for r in plan.shards[shard]]


def test_text_records_pairs_and_blank_lines(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"one\n\n  \ntwo\tthree\r\nfour\tfive\tsix\n\xffbad\n")
    plan, records = _records(path)
    assert plan.info.format == "text" and plan.info.records == 4
    assert plan.info.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [r.line for r in records] == [1, 4, 5, 6]
    assert parse(records[0], "text").text == "one"
    assert parse(records[1], "text").text == ("two", "three")
    with pytest.raises(InputError, match="line 5: more than one tab"):
        parse(records[2], "text")
    with pytest.raises(InputError, match="line 6: invalid UTF-8 at byte 1"):
        parse(records[3], "text")


@pytest.mark.parametrize(
    "line, message",
    [
        (b'{"text": "a", ', "bad JSON"),
        (b"[1, 2]", "expected a JSON object, got list"),
        (b'{"text_b": "b"}', 'missing "text"'),
        (b'{"text": ["a"]}', '"text" must be a string'),
        (b'{"text": "a", "text_b": 1}', '"text_b" must be a string'),
        (b'{"text": "a", "id": true}', '"id" must be a string or an integer'),
    ],
)
def test_bad_jsonl_lines(line, message):
    with pytest.raises(InputError, match=f"line 9: {message}") as info:
        parse(RawRecord(3, 9, (line,)), "jsonl")
    assert info.value.line == 9


def test_jsonl_ids_and_pairs():
    ex = parse(RawRecord(3, 9, (b'{"text": "a", "text_b": "b", "id": 12}',)), "jsonl")
    assert (ex.text, ex.id, ex.record, ex.line) == (("a", "b"), "12", 3, 9)
    assert parse(RawRecord(5, 6, (b'{"text": "a", "text_b": null}',)), "jsonl").id == "5"


def test_conllu_sentences_and_errors(tmp_path):
    path = tmp_path / "in.conllu"
    path.write_text(CONLLU)
    plan, records = _records(path)
    assert plan.info.format == "conllu" and plan.info.records == 3
    first = parse(records[0], "conllu")
    assert (first.text, first.id, first.line) == ("I went .", "s1", 1)
    with pytest.raises(InputError, match="line 11: word ID '3', expected 2"):
        parse(records[1], "conllu")
    assert parse(records[2], "conllu").id == "2"


def test_detect_format(tmp_path):
    cases = {
        "a.txt": "hello\n",
        "b.data": '\n{"text": "x"}\n',
        "c": CONLLU,
        "d.jsonl": "x",
        "e.conllu": "",
        "f": "1\tI\tI\tPRON\t_\t_\t0\troot\t_\t_\n",
    }
    want = {
        "a.txt": "text",
        "b.data": "jsonl",
        "c": "conllu",
        "d.jsonl": "jsonl",
        "e.conllu": "conllu",
        "f": "conllu",
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        assert detect_format(tmp_path / name) == want[name], name


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
        plan_input(tmp_path / "missing.txt")
    (tmp_path / "x.txt").write_text("a\n")
    with pytest.raises(ValueError, match="shard-size"):
        plan_input(tmp_path / "x.txt", shard_size=0)
    with pytest.raises(ValueError, match="unknown input format"):
        plan_input(tmp_path / "x.txt", fmt="csv")
