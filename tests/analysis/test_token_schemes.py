"""The three piece schemes and both special-token styles, recognised from tokens alone.

Token sequences as the families' tokenizers write them (hand-written here):
XLM-R/CamemBERT (SentencePiece, <s> </s>), ALBERT/DeBERTa-v3 (SentencePiece,
[CLS] [SEP]), ModernBERT (byte-level BPE, [CLS] [SEP]), RoBERTa, BERT.
"""

from __future__ import annotations

import numpy as np
import pytest

from jaxattn.analysis import align_words, display_tokens, readable_text
from jaxattn.token_classes import class_bits, detect_specials, token_masks

CASES = {
    "xlm-roberta": (
        ["<s>", "▁I", "▁went", "▁straw", "berries", ",", "▁ok", "</s>", "</s>", "▁b", ".", "</s>"],
        "sentencepiece",
        "<s>",
        "</s>",
    ),
    "albert": (
        ["[CLS]", "▁i", "▁went", "▁straw", "berries", ",", "▁ok", "[SEP]", "▁b", ".", "[SEP]"],
        "sentencepiece",
        "[CLS]",
        "[SEP]",
    ),
    "modernbert": (
        ["[CLS]", "I", "Ġwent", "Ġstraw", "berries", ",", "Ġok", "[SEP]", "b", ".", "[SEP]"],
        "bpe",
        "[CLS]",
        "[SEP]",
    ),
    "roberta": (
        ["<s>", "I", "Ġwent", "Ġstraw", "berries", ",", "Ġok", "</s>", "</s>", "b", ".", "</s>"],
        "bpe",
        "<s>",
        "</s>",
    ),
    "bert": (
        ["[CLS]", "i", "went", "straw", "##berries", ",", "ok", "[SEP]", "b", ".", "[SEP]"],
        "wordpiece",
        "[CLS]",
        "[SEP]",
    ),
}


@pytest.mark.parametrize("family", list(CASES))
def test_specials_punctuation_and_words_of_every_scheme(family):
    tokens, scheme, cls, sep = CASES[family]
    sp = detect_specials(tokens)
    assert (sp.scheme, sp.cls, sp.sep) == (scheme, cls, sep)
    masks = token_masks(tokens, sp)
    assert masks["cls"].nonzero()[0].tolist() == [0]
    assert [tokens[i] for i in masks["sep"].nonzero()[0]] == [sep] * tokens.count(sep)
    assert [tokens[i] for i in masks["punct"].nonzero()[0]] == [",", "."]
    assert (class_bits(tokens) == class_bits(tokens, sp)).all()
    words = align_words(tokens, ["I", "went", "strawberries,", "ok", "b."], keep_specials=False)
    straw = tokens.index(next(t for t in tokens if t.endswith("straw")))
    assert words.token_unit[straw] == words.token_unit[straw + 1] == words.token_unit[straw + 2]
    assert readable_text(tokens).lower().replace(" ", "").startswith("iwentstrawberries,ok")


def test_display_drops_word_markers_and_decodes_bytes_but_keeps_wordpiece():
    assert display_tokens(["<s>", "▁I", "▁straw", "berries", "</s>"]) == [
        "<s>",
        "I",
        "straw",
        "berries",
        "</s>",
    ]
    assert display_tokens(["[CLS]", "Ġcaf", "Ã©", "[SEP]"]) == ["[CLS]", "caf", "é", "[SEP]"]
    assert display_tokens(["[CLS]", "straw", "##berries"]) == ["[CLS]", "straw", "##berries"]
    assert readable_text(["[CLS]", "Ġcaf", "Ã©", "Ġau", "Ġlait", "[SEP]"]) == "café au lait"
    assert readable_text(["<s>", "▁caf", "é", "▁au", "▁lait", "</s>"]) == "café au lait"
    assert np.array_equal(class_bits(["[CLS]", "▁a", "[SEP]"]), [1, 0, 2])
