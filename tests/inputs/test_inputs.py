"""Input files: records found on raw bytes, parsed per format, with errors naming the line."""

from __future__ import annotations

import hashlib

import pytest

from jaxattn.errors import UsageError
from jaxattn.inputs import (
    InputError,
    RawRecord,
    check_text,
    detect_format,
    parse_record,
    read_records,
    scan_records,
    split_pair,
)

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


def test_text_records_pairs_and_blank_lines(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"one\n\n  \ntwo\tthree\r\nfour\tfive\tsix\n\xffbad\n")
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        records = list(scan_records(f, "text", digest))
    assert digest.hexdigest() == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [r.line for r in records] == [1, 4, 5, 6]
    assert [r.index for r in records] == [0, 1, 2, 3]
    assert parse_record(records[0], "text").text == "one"
    assert parse_record(records[1], "text").text == ("two", "three")
    with pytest.raises(InputError, match="line 5: more than one tab"):
        parse_record(records[2], "text")
    with pytest.raises(InputError, match="line 6: invalid UTF-8 at byte 1"):
        parse_record(records[3], "text")


@pytest.mark.parametrize(
    "line, message",
    [
        (b'{"text": "a", ', "bad JSON"),
        (b"[1, 2]", "expected a JSON object, got list"),
        (b'{"text_b": "b"}', 'missing "text"'),
        (b'{"text": ["a"]}', '"text" must be a string'),
        (b'{"text": "a", "text_b": 1}', '"text_b" must be a string'),
        (b'{"text": "a", "id": true}', '"id" must be a string or an integer'),
        (b'{"text": ""}', '"text" is empty'),  # not an example of [CLS] [SEP]
        (b'{"text": " \\t"}', '"text" is empty'),
        (b'{"text": "", "text_b": "b"}', '"text" is empty'),
        (b'{"text": "a", "text_b": ""}', '"text_b" is empty'),
    ],
)
def test_bad_jsonl_lines(line, message):
    with pytest.raises(InputError, match=f"line 9: {message}") as info:
        parse_record(RawRecord(3, 9, (line,)), "jsonl")
    assert info.value.line == 9


def test_jsonl_ids_and_pairs():
    ex = parse_record(RawRecord(3, 9, (b'{"text": "a", "text_b": "b", "id": 12}',)), "jsonl")
    assert (ex.text, ex.id, ex.index, ex.line) == (("a", "b"), "12", 3, 9)
    assert parse_record(RawRecord(5, 6, (b'{"text": "a", "text_b": null}',)), "jsonl").id == "5"


def test_conllu_sentences_and_errors(tmp_path):
    path = tmp_path / "in.conllu"
    path.write_text(CONLLU)
    with open(path, "rb") as f:
        records = list(scan_records(f, "conllu"))
    assert len(records) == 3  # the trailing comment-only block is no record
    first = parse_record(records[0], "conllu")
    assert (first.text, first.id, first.line) == ("I went .", "s1", 1)
    assert first.sentence.words == ("I", "went", ".") and first.sentence.heads == (2, 0, 2)
    with pytest.raises(InputError, match="line 11: word ID '3', expected 2"):
        parse_record(records[1], "conllu")
    assert parse_record(records[2], "conllu").id == "2"


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


@pytest.mark.parametrize(
    "line, want",
    [
        ("one text", "one text"),
        ("A ||| B", ("A", "B")),
        ("A|||B", ("A", "B")),
        ("A\tB", ("A", "B")),
        ("  spaced  ", "spaced"),  # stripped, in every command
        (" a \t b ", ("a", "b")),
        ("tab\tinside ||| pair", ("tab\tinside", "pair")),  # ||| wins over a tab
    ],
)
def test_split_pair(line, want):
    assert split_pair(line) == want


@pytest.mark.parametrize("line", ["a ||| b ||| c", "a\tb\tc"])
def test_split_pair_refuses_two_separators(line):
    with pytest.raises(InputError, match="more than one"):
        split_pair(line)


def test_every_format_reads_pairs_the_same_way(tmp_path):
    """A pair is a pair in text (both separators), JSONL and across read_records."""
    (tmp_path / "a.txt").write_text("x ||| y\nx\ty\nz\n", encoding="utf-8")
    (tmp_path / "b.jsonl").write_text(
        '{"text": "x", "text_b": "y", "id": "p"}\n{"text": "z"}\n', encoding="utf-8"
    )
    texts = [r.text for r in read_records(tmp_path / "a.txt")]
    assert texts == [("x", "y"), ("x", "y"), "z"]
    records = list(read_records(tmp_path / "b.jsonl"))
    assert [r.text for r in records] == [("x", "y"), "z"] and records[0].id == "p"


def test_an_empty_text_or_side_of_a_pair_is_a_bad_record_in_every_format(tmp_path):
    """As an empty text argument is refused: named by file and line, skipped with
    on_error="skip" (a blank line is no record at all)."""
    (tmp_path / "a.txt").write_text(
        "x\n ||| only b\nonly a |||\n|||\n\t\ny\n", encoding="utf-8"
    )  # "\t" alone: a blank line, no record; "|||": both sides empty
    (tmp_path / "b.jsonl").write_text(  # "text_b" of line 3: see test_bad_jsonl_lines
        '{"text": "x"}\n{"text": ""}\n{"text": "a", "text_b": "  "}\n{"text": "y"}\n',
        encoding="utf-8",
    )
    for name, bad in (
        ("a.txt", "2: sentence A of the pair is empty"),
        ("b.jsonl", '2: "text" is empty'),
    ):
        path = tmp_path / name
        with pytest.raises(InputError, match=f"{name}:{bad}: an example needs a sentence"):
            list(read_records(path))
        assert [r.text for r in read_records(path, on_error="skip")] == ["x", "y"]
    with open(tmp_path / "a.txt", "rb") as f:
        raw = list(scan_records(f, "text"))
    for record, side in zip(raw[1:4], "ABA", strict=True):  # " ||| only b", "only a |||", "|||"
        with pytest.raises(InputError, match=f"line {record.line}: sentence {side} of the pair"):
            parse_record(record, "text")


def test_read_records_names_file_and_line_or_skips(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"text": "a"}\n{"text": 1}\n{"text": "c"}\n')
    with pytest.raises(InputError, match=r"c\.jsonl:2: \"text\" must be a string"):
        list(read_records(path))
    assert [r.text for r in read_records(path, on_error="skip")] == ["a", "c"]
    assert [r.text for r in read_records(path, on_error="skip", limit=1)] == ["a"]
    with pytest.raises(FileNotFoundError, match="no input file"):
        list(read_records(tmp_path / "missing.txt"))
    with pytest.raises(UsageError, match="unknown input format 'csv'"):
        list(read_records(path, "csv"))


def test_conllu_records_carry_their_tree(tmp_path):
    path = tmp_path / "d.conllu"
    path.write_text(CONLLU)
    records = list(read_records(path, on_error="skip"))
    assert [r.id for r in records] == ["s1", "2"]
    assert records[0].sentence.text == "I went." and records[0].text == "I went ."


def test_a_utf8_byte_order_mark_is_no_part_of_the_first_record(tmp_path):
    """Notepad and Excel start UTF-8 files with EF BB BF: every format reads past it (it
    made line 1 of a JSONL file bad JSON, of a CoNLL-U file a 1-column token line, and
    began the first text), and only there: it is data on a later line."""
    bom = b"\xef\xbb\xbf"
    files = {
        "a.jsonl": b'{"text": "one"}\r\n{"text": "\xef\xbb\xbftwo"}\r\n',
        "b.txt": b"one\n\xef\xbb\xbftwo\n",
        "c.conllu": CONLLU.split("\n\n")[0].encode() + b"\n",
        "d": b'{"text": "one"}\n',  # no suffix: sniffed as JSONL past the mark
    }
    for name, data in files.items():
        path = tmp_path / name
        path.write_bytes(bom + data)
        records = list(read_records(path))
        assert records[0].text == ("I went ." if name == "c.conllu" else "one"), name
        if len(records) > 1:
            assert records[1].text == "\ufefftwo", name
    assert detect_format(tmp_path / "d") == "jsonl"
    digest = hashlib.sha256()  # the fingerprint still covers every byte
    with open(tmp_path / "b.txt", "rb") as f:
        list(scan_records(f, "text", digest))
    assert digest.hexdigest() == hashlib.sha256(bom + files["b.txt"]).hexdigest()


@pytest.mark.parametrize(
    ("text", "got"),
    [  # the engine's and the client's message said "got tuple" of a pair holding a None
        (("a", "b", "c"), "a tuple of 3 items"),
        (["a"], "a list of 1 item"),
        (("a", None), "a pair whose item 1 is NoneType"),
        ([3, "b"], "a pair whose item 0 is int"),
        (b"abc", "bytes"),
        (None, "NoneType"),
    ],
)
def test_check_text_says_what_the_entry_is(text, got):
    message = "texts[4] must be a string or a (sentence_a, sentence_b) pair of strings, got "
    with pytest.raises(UsageError) as e:
        check_text(text, 4)
    assert str(e.value) == message + got


def test_check_text_keeps_strings_and_makes_a_listed_pair_a_tuple():
    assert check_text("a b", 0) == "a b"
    assert check_text(["a", "b"], 0) == ("a", "b")
    with pytest.raises(InputError, match="text 2 is not valid UTF-8"):
        check_text(("a", "b\udcff"), 2)


@pytest.mark.parametrize("caller", ["engine", "client"])
def test_the_engine_and_the_client_check_texts_alike(caller):
    if caller == "engine":
        from jaxattn.engine.tokenize import check_texts as check
    else:
        from jaxattn.client.request import texts_message as check
    with pytest.raises(UsageError, match=r"texts\[1\] .* got a pair whose item 1 is NoneType"):
        check(["a", ("b", None)])
    with pytest.raises(UsageError, match="texts must be a list, got NoneType"):
        check(None)  # the client's was a TypeError
    with pytest.raises(UsageError, match="texts must be a list, got generator"):
        check(t for t in ["a"])  # the client's capture read it here and returned no capture


@pytest.mark.parametrize(
    ("path", "limit", "message"),
    [  # TypeErrors from pathlib and from comparing "3" with an int; -1 read nothing
        (["a text"], None, r"read_records reads a file: give its path, got list \(a list of"),
        (None, None, "read_records reads a file: give its path, got NoneType"),
        ("corpus.txt", "3", "limit must be None or a whole number of records >= 0, got '3'"),
        ("corpus.txt", -1, "limit must be None or a whole number of records >= 0, got -1"),
    ],
)
def test_read_records_refuses_what_is_no_file_or_limit(tmp_path, path, limit, message):
    (tmp_path / "corpus.txt").write_text("a\nb\n")
    if isinstance(path, str):
        path = tmp_path / path
    with pytest.raises(UsageError, match=message):
        list(read_records(path, limit=limit))
