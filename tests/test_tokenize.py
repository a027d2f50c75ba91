"""Tokenisation edge cases: sentence B positions and the tokenizer's own presets."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    "text, b_start",
    [
        (("i went .", ""), 5),  # [CLS] i went . [SEP] [SEP]: B would start at the last [SEP]
        (("", "i went ."), 2),  # [CLS] [SEP] i went . [SEP]
        (("", ""), 2),
        ("i went .", None),
    ],
)
def test_sentence_b_start_of_pairs_with_empty_sentences(engines, text, b_start):
    enc = engines["bert"].tokenize([text])[0]
    assert enc.sentence_b_start == b_start


def test_tokenizer_presets_never_truncate_or_pad(engines):
    # A tokenizer.json may carry truncation/padding (all-MiniLM-L6-v2's pads and
    # cuts at 128); the engine must see the real length.
    engine = engines["bert"]
    engine.tokenizer._backend.enable_truncation(4)
    engine.tokenizer._backend.enable_padding(length=30)
    try:
        from jaxattn.tokenize import Tokenizer

        fresh = Tokenizer(engine.tokenizer.hf, engine.config)
        assert fresh.encode(["i went to the store ."])[0].length == 8
    finally:
        engine.tokenizer._backend.no_truncation()
        engine.tokenizer._backend.no_padding()


def test_a_bare_string_is_refused_with_a_hint(engines):
    with pytest.raises(ValueError, match="wrap it in a list"):
        engines["bert"].capture("i went .")
