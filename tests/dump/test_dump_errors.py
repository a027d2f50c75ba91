"""Bad records (--on-error) and too-long examples (--too-long): reported, counted, stored or not."""

from __future__ import annotations

import io

import pytest
from dump_helpers import CORPUS, WHAT, assert_same_capture, options, texts_of, write_jsonl

import jaxattn
from jaxattn.dump import run_dump
from jaxattn.dump.counts import Counts
from jaxattn.dump.distributed import Process
from jaxattn.store.metadata import StoreMismatch

GOOD = CORPUS[:4]


@pytest.fixture
def bad_corpus(tmp_path):
    """4 good records among 5 unreadable ones and a blank line (not a record)."""
    path = write_jsonl(
        tmp_path / "bad.jsonl",
        [GOOD[0], "{not json", GOOD[1], {"id": "no-text"}, "", GOOD[2], {"text": 3}, GOOD[3]],
    )
    with open(path, "ab") as f:
        f.write(b'{"text": "caf\xe9"}\n')  # Latin-1, not UTF-8: line 9
        f.write(b'{"text": "a", "text_b": ""}\n')  # not a pair of [CLS] a [SEP] [SEP]: line 10
    return path


def _dump(engines, checkpoint, corpus, out, **overrides):
    stream = io.StringIO()
    opts = options(corpus, out, shard_size=100, **overrides)
    result = run_dump(engines["bert"], opts, model_dir=checkpoint, stream=stream)
    return result, stream.getvalue()


def test_bad_records_are_reported_by_line_and_skipped(
    engines, bert_checkpoint, bad_corpus, tmp_path
):
    result, log = _dump(engines, bert_checkpoint, bad_corpus, tmp_path / "s", on_error="skip")
    assert result.counts.examples == 4 and result.counts.errors == 5
    assert f"{bad_corpus}:2: bad JSON" in log
    assert f'{bad_corpus}:4: missing "text"' in log
    assert f'{bad_corpus}:7: "text" must be a string' in log
    assert f"{bad_corpus}:9: invalid UTF-8 at byte 14" in log
    assert f'{bad_corpus}:10: "text_b" is empty' in log
    assert "4 examples in 1 shard (0 already done), 5 skipped (5 bad records), 0 truncated" in log
    assert "error" not in log.splitlines()[-1]  # skipped as asked: the job did not fail
    store = jaxattn.open_store(tmp_path / "s")
    assert [e.line for e in store.entries] == [1, 3, 6, 8]
    assert [e.record for e in store.entries] == [0, 2, 4, 6]  # the blank line is no record
    part = store.parts[0]
    assert [(s.line, s.reason) for s in part.skipped] == [
        (2, "error"),
        (4, "error"),
        (7, "error"),
        (9, "error"),
        (10, "error"),
    ]
    want = engines["bert"].capture(texts_of(GOOD), what=WHAT)
    for got, ref in zip(store, want, strict=True):
        assert_same_capture(got, ref)


def test_on_error_stop_names_the_line_and_commits_nothing(
    engines, bert_checkpoint, bad_corpus, tmp_path
):
    with pytest.raises(jaxattn.InputError, match=r"bad\.jsonl:2: bad JSON.*--on-error skip"):
        _dump(engines, bert_checkpoint, bad_corpus, tmp_path / "s", on_error="stop")
    assert not (tmp_path / "s" / "manifest" / "s000000").exists()


@pytest.fixture
def long_corpus(tmp_path, engines):
    """A text file: 4 short lines and one over the model's 67-token limit (line 3)."""
    limit = engines["bert"].config.max_length
    long = " ".join(["the cat"] * limit)
    lines = [texts_of(GOOD)[0], texts_of(GOOD)[1], long, "he ran\tshe sat", texts_of(GOOD)[3]]
    path = tmp_path / "long.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    "too_long, on_error, counts",
    [
        ("skip", "stop", Counts(examples=4, skipped=1)),
        ("error", "skip", Counts(examples=4, errors=1)),
        ("truncate", "stop", Counts(examples=5, truncated=1)),
    ],
)
def test_too_long_examples(
    engines, bert_checkpoint, long_corpus, tmp_path, too_long, on_error, counts
):
    result, log = _dump(
        engines, bert_checkpoint, long_corpus, tmp_path / "s", too_long=too_long, on_error=on_error
    )
    got = result.counts
    assert (got.examples, got.skipped, got.errors, got.truncated) == (
        counts.examples,
        counts.skipped,
        counts.errors,
        counts.truncated,
    )
    why = {"skip": " (1 too long)", "error": " (1 bad record)", "truncate": ""}[too_long]
    summary = (
        f"{counts.examples} examples in 1 shard (0 already done), "
        f"{counts.skipped + counts.errors} skipped{why}, {counts.truncated} truncated, "
    )
    assert summary in log
    store = jaxattn.open_store(tmp_path / "s")
    assert [e.line for e in store.entries] == (
        [1, 2, 3, 4, 5] if too_long == "truncate" else [1, 2, 4, 5]
    )
    if too_long == "truncate":
        entry = store.entries[2]
        limit = engines["bert"].config.max_length
        assert entry.truncated and entry.length == limit and store[2].attention.shape[-1] == limit
    else:
        assert f"{long_corpus}:3: longer than the model's limit of 67 tokens" in log
        reason = "too_long" if too_long == "skip" else "error"
        assert [(s.line, s.reason) for s in store.parts[0].skipped] == [(3, reason)]


class CountingBackend:
    """A tokenizer backend that records every text it encodes (the costly pass)."""

    def __init__(self, backend):
        self.backend, self.texts = backend, []

    def encode_batch(self, texts, **kwargs):
        self.texts.extend(texts)
        return self.backend.encode_batch(texts, **kwargs)

    def __getattr__(self, name):
        return getattr(self.backend, name)


@pytest.mark.parametrize("too_long", ["skip", "error", "truncate"])
def test_a_long_line_is_tokenized_once(
    engines, bert_checkpoint, long_corpus, tmp_path, monkeypatch, too_long
):
    """A long line (a 5 MB one is the costly case) costs one tokenization, as every line
    does, whatever the policy (truncate then cuts it: the tokenizer's own second copy);
    what is stored is what capturing the kept texts gives."""
    tokenizer = engines["bert"].tokenizer
    counting = CountingBackend(tokenizer._backend)
    monkeypatch.setattr(tokenizer, "_backend", counting)
    _dump(engines, bert_checkpoint, long_corpus, tmp_path / "s", too_long=too_long, on_error="skip")
    lines = long_corpus.read_text().splitlines()
    texts = [tuple(x.split("\t")) if "\t" in x else x for x in lines]
    assert sorted(counting.texts, key=str) == sorted(texts, key=str)  # each text once
    monkeypatch.undo()
    kept = texts if too_long == "truncate" else texts[:2] + texts[3:]
    want = engines["bert"].capture(kept, what=WHAT, too_long="truncate")
    store = jaxattn.open_store(tmp_path / "s")
    assert len(store) == len(want)
    for got, ref in zip(store, want, strict=True):
        assert_same_capture(got, ref)


def test_too_long_error_with_on_error_stop(engines, bert_checkpoint, long_corpus, tmp_path):
    with pytest.raises(jaxattn.InputError, match=r"long\.txt:3: longer than the model's limit"):
        _dump(engines, bert_checkpoint, long_corpus, tmp_path / "s")  # the defaults


def test_a_store_whose_first_shard_failed_starts_over_with_the_advised_option(
    engines, bert_checkpoint, long_corpus, tmp_path
):
    """It held no finished shard, so nothing is lost: the rerun with --too-long skip (what
    the error advised) was refused, "delete it and rerun"."""
    out = tmp_path / "s"
    with pytest.raises(jaxattn.InputError, match="--too-long skip"):
        _dump(engines, bert_checkpoint, long_corpus, out)
    assert (out / "zarr.json").exists() and not (out / "manifest" / "s000000").exists()
    two = Process(index=0, count=2)  # other processes may be writing: refused, as it was
    with pytest.raises(StoreMismatch, match="no finished shard yet: delete it and rerun"):
        run_dump(
            engines["bert"],
            options(long_corpus, out, too_long="skip"),
            model_dir=bert_checkpoint,
            process=two,
        )
    result, log = _dump(engines, bert_checkpoint, long_corpus, out, too_long="skip")
    started = [line for line in log.splitlines() if "over" in line]
    assert started == [
        f"dump: started the store at {out} over (no shard of it was finished, and this "
        "command differs: too-long policy (--too-long): the store has 'error', this command "
        "gives 'skip')"
    ]
    assert result.counts.examples == 4 and result.counts.skipped == 1
    store = jaxattn.open_store(out)
    assert store.metadata["too_long"] == "skip" and [e.line for e in store.entries] == [1, 2, 4, 5]
    # a finished shard is work to keep: another command is refused
    rerun = "Rerun the original command.*--overwrite to delete the store"
    with pytest.raises(StoreMismatch, match=rerun):
        _dump(engines, bert_checkpoint, long_corpus, out, too_long="truncate")
