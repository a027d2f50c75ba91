"""Tokenisation edge cases: sentence B positions and the tokenizer's own presets."""

from __future__ import annotations

import pytest

from jaxattn.errors import UsageError


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
    from jaxattn.engine.tokenize import Tokenizer

    engine = engines["bert"]
    hf = engine.tokenizer.hf
    hf.backend_tokenizer.enable_truncation(4)
    hf.backend_tokenizer.enable_padding(length=30)
    try:
        fresh = Tokenizer(hf, engine.config)
        assert fresh.encode(["i went to the store ."])[0].length == 8
    finally:
        hf.backend_tokenizer.no_truncation()
        hf.backend_tokenizer.no_padding()


def test_truncating_and_strict_calls_do_not_interfere_across_threads(engines):
    import threading

    engine = engines["bert"]
    long = " ".join(["store"] * 100)
    errors, cut = [], []

    def strict():
        for _ in range(200):
            try:
                engine.tokenize([long])
                errors.append("no error")
            except ValueError:
                pass

    def truncating():
        for _ in range(200):
            cut.append(engine.tokenize([long], too_long="truncate")[0].length)

    threads = [threading.Thread(target=strict), threading.Thread(target=truncating)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and set(cut) == {engine.config.max_length}


def test_a_bare_string_is_refused_with_a_hint(engines):
    with pytest.raises(UsageError, match="wrap it in a list"):
        engines["bert"].capture("i went .")
