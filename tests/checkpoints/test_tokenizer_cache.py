"""The tokenizer kept beside the compiled programs: a second load reads the backend
transformers resolved, without importing transformers, and tokenises exactly as
transformers' own tokenizer does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jaxattn.checkpoints import tokenizer_cache
from jaxattn.checkpoints.hf_files import read_config
from jaxattn.checkpoints.loading import read_tokenizer
from jaxattn.engine import tokenize

TEXTS = ["The quick brown fox, 1,024 ways.", "naïve café", "   odd   spacing\tand tabs"]
PAIRS = [("Where is it?", "It is here.")]


def _refuse_transformers(monkeypatch):
    def refused(path):
        raise AssertionError(f"transformers was asked to read {path}")

    monkeypatch.setattr(tokenize, "_transformers_tokenizer", refused)


def _checkpoint(family: str, out: Path, checkpoint_dirs) -> Path:
    """A tiny checkpoint of each kind of tokenizer: WordPiece (bert), byte-level BPE
    (roberta, gpt2, llama with its BOS), Unigram (deberta, albert), gemma's."""
    if family in ("bert", "roberta"):
        return checkpoint_dirs[family]
    if family == "gpt2":
        from gpt2_fixture import make_gpt2_checkpoint

        return make_gpt2_checkpoint(out)
    if family == "llama":
        from llama_fixture import make_llama_checkpoint

        return make_llama_checkpoint(out)
    if family == "deberta":
        from deberta_fixture import make_deberta_checkpoint

        return make_deberta_checkpoint(out)
    if family == "gemma2":
        from gemma_fixture import make_gemma_checkpoint

        return make_gemma_checkpoint(family, out)
    from family_fixtures import make_family_checkpoint

    return make_family_checkpoint(family, out)


@pytest.mark.parametrize(
    "family", ["bert", "roberta", "gpt2", "llama", "deberta", "albert", "gemma2"]
)
def test_a_second_load_tokenises_as_transformers_without_it(
    checkpoint_dirs, family, tmp_path, monkeypatch
):
    from transformers import AutoTokenizer

    path = _checkpoint(family, tmp_path / "model", checkpoint_dirs)
    tmp_path = tmp_path / "cache"
    config = read_config(path)
    read_tokenizer(path, config, tmp_path)  # the first load keeps the backend
    assert len(list((tmp_path / tokenizer_cache.SUBDIRECTORY).glob("*.json"))) == 1
    _refuse_transformers(monkeypatch)
    kept = read_tokenizer(path, config, tmp_path)
    reference = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    texts = TEXTS + ([] if config.causal else PAIRS)
    for text, got in zip(texts, kept.encode(texts), strict=True):
        want = reference(*((text,) if isinstance(text, str) else text))
        assert list(got.ids) == want["input_ids"], text
        if "token_type_ids" in want:
            assert list(got.type_ids) == want["token_type_ids"], text
    with pytest.raises(AssertionError, match="transformers was asked"):
        kept.hf  # noqa: B018 - read only when asked for
    monkeypatch.undo()
    assert kept.hf.backend_tokenizer.to_str() == kept.backend_json


@pytest.mark.parametrize("edited", ["tokenizer_config.json", "config.json", "tokenizer.json"])
def test_changed_files_are_read_again(bert_checkpoint, tmp_path, edited, monkeypatch):
    path = tmp_path / "model"
    shutil.copytree(bert_checkpoint, path)
    cache = tmp_path / "cache"
    config = read_config(path)
    read_tokenizer(path, config, cache)
    doc = json.loads((path / edited).read_text())
    if edited == "tokenizer.json":  # the same tokenizer in other bytes
        (path / edited).write_text(json.dumps(doc, indent=1))
    else:  # a field every reader ignores
        (path / edited).write_text(json.dumps({**doc, "jaxattn_test_note": "edited"}))
    calls = []
    real = tokenize._transformers_tokenizer
    monkeypatch.setattr(tokenize, "_transformers_tokenizer", lambda p: calls.append(p) or real(p))
    read_tokenizer(path, config, cache)
    assert calls == [path]
    assert len(list((cache / tokenizer_cache.SUBDIRECTORY).glob("*.json"))) == 2


@pytest.mark.parametrize("damage", ['{"backend": "not a tokenizer"}', "{not json", '{"x": 1}'])
def test_a_damaged_entry_is_read_again_and_rewritten(bert_checkpoint, tmp_path, damage):
    config = read_config(bert_checkpoint)
    first = read_tokenizer(bert_checkpoint, config, tmp_path)
    (entry,) = (tmp_path / tokenizer_cache.SUBDIRECTORY).glob("*.json")
    entry.write_text(damage)
    again = read_tokenizer(bert_checkpoint, config, tmp_path)
    assert again.encode(TEXTS) == first.encode(TEXTS)
    assert json.loads(entry.read_text())["backend"] == first.backend_json


def test_a_cache_that_cannot_be_written_is_left_alone(bert_checkpoint, tmp_path, caplog):
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # the cache's folder cannot be made under a file
    tok = read_tokenizer(bert_checkpoint, read_config(bert_checkpoint), blocked / "cache")
    assert tok.encode(TEXTS[:1])[0].length > 2
    assert "could not keep the tokenizer" in caplog.text
