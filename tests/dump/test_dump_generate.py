"""`jaxattn dump --generate N` on a tiny random GPT-2: each example is stored as prompt +
continuation with its `generated_start`, as a local `capture(generate=N)` gives it; a
prompt too long to continue is skipped or reported by line; an interrupted generating
dump resumes to the uninterrupted store; a resume with other generation flags is
refused naming them; an entry without the field (older stores) reads as None. (The
CLI's flags: tests/cli/test_cli_dump_generate.py.)"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from dump_helpers import assert_same_store
from gpt2_fixture import make_gpt2_checkpoint  # noqa: E402

import jaxattn
from jaxattn.dump import DumpOptions, run_dump
from jaxattn.errors import CaptureFileError, InputError
from jaxattn.store import layout
from jaxattn.store.metadata import StoreMismatch

NEW = 4
WHAT = ("attention", "hidden_states")
PROMPTS = ["The quick brown fox", "Hello, world.", "a", "the cat sat", "b c d"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = make_gpt2_checkpoint(tmp_path_factory.mktemp("gpt2"))
    return path, jaxattn.load(path, buckets=(32,))


@pytest.fixture(scope="module")
def grows(model):
    """A prompt that fits the positions alone, not with NEW tokens after it."""
    engine, limit = model[1], model[1].config.max_length
    texts = [" ".join(["fox"] * n) for n in range(1, 99)]  # as the text reader strips it
    text = next(t for t in texts if engine.tokenize([t])[0].length + NEW > limit)
    assert engine.tokenize([text])[0].length <= limit
    return text


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, grows):
    lines = [PROMPTS[0], PROMPTS[1], grows, *PROMPTS[2:]]  # record 2 cannot be continued
    path = tmp_path_factory.mktemp("corpus") / "in.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def opts(corpus, out, **change) -> DumpOptions:
    base = dict(
        input=corpus,
        out=str(out),
        what=WHAT,
        shard_size=2,
        quiet=True,
        too_long="skip",
        generate=NEW,
        stop_at_eos=False,
    )
    return DumpOptions(**{**base, **change})


@pytest.fixture(scope="module")
def store(model, corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("gen") / "s.zarr"
    result = run_dump(model[1], opts(corpus, out), model_dir=model[0])
    assert (result.counts.examples, result.counts.skipped) == (5, 1)
    return out


def test_the_store_holds_prompt_and_continuation_as_a_local_capture(model, store):
    engine = model[1]
    opened = jaxattn.open_store(store)
    assert opened.metadata["generate"] == {"max_new_tokens": NEW, "stop_at_eos": False}
    want = engine.capture(PROMPTS, generate=NEW, stop_at_eos=False, what=WHAT)
    gens = engine.generate(PROMPTS, NEW, stop_at_eos=False)
    assert len(opened) == len(want) == 5
    for got, cap, g, entry in zip(opened, want, gens, opened.entries, strict=True):
        assert got.tokens == cap.tokens == g.prompt.tokens + g.tokens
        assert got.generated_start == entry.generated_start == g.prompt.length
        assert got.stop == entry.stop == g.stop == "max_new_tokens"
        assert got.text == g.prompt.text and not got.truncated
        for q in WHAT:  # float32 rounding of other batches only
            np.testing.assert_allclose(got.array(q), cap.array(q), rtol=1e-5, atol=1e-5)
    part = json.loads((store / layout.manifest_key(1)).read_text())
    part = part["attributes"][layout.MANIFEST_ATTRIBUTE]
    assert [e["generated_start"] for e in part["examples"]] == [gens[2].prompt.length]
    assert [e["stop"] for e in part["examples"]] == ["max_new_tokens"]
    (skipped,) = part["skipped"]
    assert (skipped["record"], skipped["reason"]) == (2, "too_long")
    assert f"prompt tokens + {NEW} new tokens exceed the model's limit" in skipped["message"]


def test_a_prompt_too_long_to_continue_is_an_error_by_line(model, corpus, tmp_path):
    with pytest.raises(InputError, match=r"in.txt:3: its \d+ prompt tokens \+ 4 new"):
        run_dump(model[1], opts(corpus, tmp_path / "e", too_long="error"), model_dir=model[0])
    out = tmp_path / "t"
    run_dump(model[1], opts(corpus, out, too_long="truncate"), model_dir=model[0])
    cut = jaxattn.open_store(out)[2]  # generated until the positions are full
    assert cut.length == model[1].config.max_length and cut.generated_start < cut.length


def test_an_empty_prompt_is_a_bad_record_by_line(model, tmp_path):
    # GPT-2's tokenizer adds no BOS: "" is no token to continue (was an IndexError);
    # an empty text is a bad record of every input file, before it is tokenized
    path = tmp_path / "in.jsonl"
    rows = [{"text": "a b"}, {"text": ""}, {"text": "c"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(InputError, match=r'in.jsonl:2: "text" is empty'):
        run_dump(model[1], opts(path, tmp_path / "e", shard_size=3), model_dir=model[0])
    out = tmp_path / "s"
    result = run_dump(model[1], opts(path, out, on_error="skip"), model_dir=model[0])
    assert (result.counts.examples, result.counts.errors) == (2, 1)
    assert [c.text for c in jaxattn.open_store(out)] == ["a b", "c"]


def test_an_interrupted_generating_dump_resumes_to_the_same_store(
    model, corpus, store, tmp_path, monkeypatch
):
    from jaxattn.dump import shard

    out = tmp_path / "s.zarr"
    add = shard.ShardWriter.add

    def dies_in_shard_1(self, cap, **kw):
        if self.shard == 1:
            raise KeyboardInterrupt  # killed after shard 0's commit, data of 1 begun
        return add(self, cap, **kw)

    with monkeypatch.context() as m:
        m.setattr(shard.ShardWriter, "add", dies_in_shard_1)
        with pytest.raises(KeyboardInterrupt):
            run_dump(model[1], opts(corpus, out), model_dir=model[0])
    assert len(jaxattn.open_store(out, partial=True).parts) == 1
    result = run_dump(model[1], opts(corpus, out), model_dir=model[0])
    assert result.resumed == 1
    assert_same_store(jaxattn.open_store(out), jaxattn.open_store(store), exact=False)


def test_a_resume_with_other_generation_flags_is_refused(model, corpus, store, tmp_path):
    out = tmp_path / "s.zarr"
    shutil.copytree(store, out)
    for change, named in (
        (dict(generate=NEW + 1), f"generated tokens (--generate): the store has {NEW}, "),
        (dict(generate=None), f"generated tokens (--generate): the store has {NEW}, "),
        (dict(stop_at_eos=True), "stop at an end-of-sequence token (--ignore-eos turns it off): "),
    ):
        with pytest.raises(StoreMismatch, match=re_escape(named)):
            run_dump(model[1], opts(corpus, out, **change), model_dir=model[0])
    plain = tmp_path / "plain.zarr"
    run_dump(model[1], opts(corpus, plain, generate=None), model_dir=model[0])
    assert "generate" not in jaxattn.open_store(plain).metadata
    with pytest.raises(StoreMismatch, match=r"the store has None, this command gives 4"):
        run_dump(model[1], opts(corpus, plain), model_dir=model[0])


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


def test_an_entry_without_the_field_reads_as_none_and_a_bad_one_is_damage(store, tmp_path):
    out = tmp_path / "s.zarr"
    shutil.copytree(store, out)
    key = out / layout.manifest_key(0)
    doc = json.loads(key.read_text())
    examples = doc["attributes"][layout.MANIFEST_ATTRIBUTE]["examples"]
    for e in examples:
        del e["generated_start"], e["stop"]  # as a store written before the fields
    key.write_text(json.dumps(doc))
    opened = jaxattn.open_store(out)
    assert [c.generated_start for c in opened[:2]] == [None, None]
    assert [c.stop for c in opened[:3]] == [None, None, "max_new_tokens"]
    assert opened[2].generated_start is not None
    for bad in (examples[0]["length"] + 1, -1, "3", True):
        examples[0]["generated_start"] = bad
        key.write_text(json.dumps(doc))
        with pytest.raises(CaptureFileError, match="generated_start is not what jaxattn writes"):
            jaxattn.open_store(out)
    examples[0]["generated_start"] = 1
    for bad in ("stop_string", 3):
        examples[0]["stop"] = bad
        key.write_text(json.dumps(doc))
        with pytest.raises(CaptureFileError, match="stop is not what jaxattn writes"):
            jaxattn.open_store(out)
    examples[0]["stop"], examples[0]["generated_start"] = "eos", None  # no continuation
    key.write_text(json.dumps(doc))
    with pytest.raises(CaptureFileError, match="stop is not what jaxattn writes"):
        jaxattn.open_store(out)


def test_dump_options_default_to_no_generation():
    assert DumpOptions(input=Path("x"), out="y").generate is None
    fields = {f.name for f in dataclasses.fields(DumpOptions)}
    assert {"generate", "stop_at_eos"} <= fields


def test_the_stop_at_eos_flag_reaches_the_generation(model, corpus, tmp_path, monkeypatch):
    from jaxattn.engine import generate as generation

    asked, real = [], generation.generate

    def spy(engine, texts, new, **kw):
        asked.append((len(texts), new, kw["stop_at_eos"]))
        return real(engine, texts, new, **kw)

    monkeypatch.setattr(generation, "generate", spy)
    for stop in (True, False):
        out = tmp_path / f"s{stop}"
        run_dump(model[1], opts(corpus, out, stop_at_eos=stop, limit=2), model_dir=model[0])
        assert jaxattn.open_store(out).metadata["generate"]["stop_at_eos"] is stop
    assert asked == [(2, NEW, True), (2, NEW, False)]
