"""Inputs: files and arguments -> the texts to capture (the first stage; no numpy).

    from jaxattn.inputs import read_records, split_pair
    texts = [r.text for r in read_records("corpus.jsonl")]
    split_pair("I went to the store. ||| At the store, I bought fresh strawberries.")

The one reader every command uses (capture, view, analyze, dump, bench,
loadtest) and `jaxattn web`, so every input format works everywhere:
- text: one example per line; a pair as ``A ||| B`` or ``A<TAB>B``;
- JSONL: {"text": ..., "text_b": optional, "id": optional} per line;
- CoNLL-U: each sentence's words joined by spaces, with its parsed tree.

Modules: `formats` (one record -> `Record`, `split_pair`, `detect_format`),
`records` (a file -> raw records, for sharding, and parsed records),
`conllu` (the CoNLL-U reader: FORM, HEAD, DEPREL), `arguments` (when a
command-line argument is a file, not a text; the shipped `SAMPLE_CORPUS`),
`utf8` (a file's bytes as text: the byte-order mark, a line that is not UTF-8).
"""

from jaxattn.inputs.arguments import SAMPLE_CORPUS, STDIN, is_file_argument, looks_like_path
from jaxattn.inputs.conllu import Sentence, coarse_relation, read_conllu
from jaxattn.inputs.formats import (
    FORMATS,
    PAIR_SEPARATOR,
    READER,
    InputError,
    RawRecord,
    Record,
    Text,
    check_text,
    check_utf8,
    detect_format,
    parse_record,
    split_pair,
)
from jaxattn.inputs.records import ON_ERROR, TOO_LONG, read_records, scan_records

__all__ = [
    "FORMATS",
    "ON_ERROR",
    "TOO_LONG",
    "PAIR_SEPARATOR",
    "READER",
    "SAMPLE_CORPUS",
    "STDIN",
    "InputError",
    "RawRecord",
    "Record",
    "Sentence",
    "Text",
    "coarse_relation",
    "check_text",
    "check_utf8",
    "detect_format",
    "is_file_argument",
    "looks_like_path",
    "parse_record",
    "read_conllu",
    "read_records",
    "scan_records",
    "split_pair",
]
