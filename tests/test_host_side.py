"""The engine's host-side work per call (issue 26): tokenisation, `host.pack`, `host.unpack`,
each against a reference written out here, and the errors-first contract."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hf_fixtures import EXAMPLE_A, EXAMPLE_B
from tokenizers import Tokenizer as Backend

from jaxattn.dtypes import PROBABILITY_SCALE
from jaxattn.engine import batching, host
from jaxattn.errors import TooLongError
from jaxattn.quantities import MAPS, QUANTITIES
from jaxattn.token_classes import class_bits

LONG = " ".join(["store"] * 100)  # over the tiny models' limit
TEXTS = [
    EXAMPLE_A,
    (EXAMPLE_A, EXAMPLE_B),
    "",
    ("", EXAMPLE_B),
    EXAMPLE_B,
    (EXAMPLE_B, ""),
    "i went .",
    EXAMPLE_A + " " + EXAMPLE_B,
    ("a", "b"),
]


def reference(engine, text, truncate=False):
    """(ids, type_ids, tokens, sentence_b_start) of one text, from a backend of its own."""
    backend = Backend.from_str(engine.tokenizer.backend_json)
    backend.no_padding()
    if truncate:
        backend.enable_truncation(engine.config.max_length, strategy="longest_first")
    else:
        backend.no_truncation()
    e = backend.encode(*(text if isinstance(text, tuple) else (text,)))
    b = None
    if isinstance(text, tuple):
        b = next((j for j, s in enumerate(e.sequence_ids) if s == 1), len(e.ids) - 1)
    return tuple(e.ids), tuple(e.type_ids), tuple(e.tokens), b


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_tokenize_is_each_text_tokenised_alone(engines, family):
    engine = engines[family]
    texts = TEXTS + [LONG, EXAMPLE_A]
    got = engine.tokenize(texts, too_long="truncate")
    assert len(got) == len(texts)
    for i, (text, e) in enumerate(zip(texts, got, strict=True)):
        long = text is LONG
        assert (e.ids, e.type_ids, e.tokens, e.sentence_b_start) == reference(engine, text, long), i
        assert e.text == text and e.truncated is long and e.length == len(e.ids)
    skipped = engine.tokenize(texts, too_long="skip")
    assert [i for i, e in enumerate(skipped) if e is None] == [len(TEXTS)]
    assert [e for e in skipped if e is not None] == [e for e in got if not e.truncated]


def test_the_first_text_over_the_limit_is_the_one_named(engines):
    texts = [EXAMPLE_A] * 5 + [LONG] + [EXAMPLE_B] * 3 + [LONG]
    with pytest.raises(TooLongError) as raised:
        engines["bert"].tokenize(texts)
    assert raised.value.index == 5


def test_a_late_text_over_the_limit_stops_the_call_before_anything_runs(engines, monkeypatch):
    engine = engines["bert"]
    dispatched = []
    monkeypatch.setattr(engine.pipeline, "dispatch", lambda *a, **k: dispatched.append(a))
    texts = [EXAMPLE_A] * 7 + [LONG]
    for call in (engine.capture, lambda t: next(iter(engine.stream(t)))):
        with pytest.raises(TooLongError) as raised:
            call(texts)
        assert raised.value.index == 7
    assert dispatched == []


def test_length_is_counted_again_for_a_replaced_text(engines):
    e = engines["bert"].tokenize([EXAMPLE_A])[0]
    assert e.length == len(e.ids)
    cut = dataclasses.replace(e, ids=e.ids[1:], type_ids=e.type_ids[1:], tokens=e.tokens[1:])
    assert cut.length == e.length - 1


@pytest.mark.parametrize("family", ["bert", "distilbert"])  # distilbert: no token types
@pytest.mark.parametrize("what", [("attention",), ("head_stats",)])
def test_pack_fills_each_row_as_written_out_row_by_row(engines, family, what):
    engine = engines[family]
    tokenized = engine.tokenize(TEXTS)
    spec = engine.make_spec(what)
    rows = (3, 0, 7, 1, 2)  # out of order; 3 dummy rows after them
    batch = batching.Batch(32, 8, rows)
    ids, type_ids, mask, classes, _ = host.pack(batch, tokenized, engine.config, spec)
    config = engine.config
    for r in range(batch.size):
        e = tokenized[rows[r]] if r < len(rows) else None
        n = e.length if e else 0
        want_ids = np.full(batch.length, config.pad_token_id)
        want_types = np.zeros(batch.length)
        want_mask = np.zeros(batch.length, bool)
        want_classes = np.zeros(batch.length)
        if e:
            want_ids[:n] = e.ids
            want_types[:n] = e.type_ids if config.type_vocab_size else 0
            want_mask[:n] = True
            if "head_stats" in what:
                want_classes[:n] = class_bits(e.tokens)
        else:
            want_mask[0] = True  # a dummy row's one real key
        assert np.array_equal(ids[r], want_ids), r
        assert np.array_equal(type_ids[r], want_types), r
        assert np.array_equal(mask[r], want_mask), r
        assert np.array_equal(classes[r], want_classes), r
    assert (ids.dtype, type_ids.dtype, mask.dtype, classes.dtype) == (
        np.int32,
        np.int32,
        np.bool_,
        np.int8,
    )


@pytest.mark.parametrize(
    "request_",
    [
        dict(what=("attention", "fx_norm", "hidden_states")),
        dict(what=("attention", "scores"), query_positions="-3:", key_positions=[0, 1]),
        dict(what=("attention", "fx_norm"), dtype="uint8"),
    ],
    ids=["float32", "positions", "uint8"],
)
def test_unpack_cuts_each_row_as_written_out_here(engines, request_):
    engine = engines["bert"]
    tokenized = engine.tokenize(TEXTS)
    spec = engine.make_spec(**request_)
    rows = (4, 0, 8, 1, 6)  # odd lengths, out of order, 2 dummy rows
    batch = batching.Batch(32, 7, rows)
    blocks = host.host_blocks(engine.dispatch(batch, tokenized, spec))
    got = list(host.unpack(batch, blocks, tokenized, spec, engine.provenance))
    assert [pos for pos, _ in got] == list(rows)
    for r, (pos, cap) in enumerate(got):
        e = tokenized[pos]
        n = e.length
        rows_kept = spec.positions_of_example(n)["query_positions"]
        keys_kept = spec.positions_of_example(n)["key_positions"]
        assert cap.tokens == e.tokens and cap.text == e.text
        assert cap.sentence_b_start == e.sentence_b_start
        assert cap.query_positions == rows_kept and cap.key_positions == keys_kept
        for name in spec.what:
            full = np.asarray(blocks[name]["data"].row(r))
            selected = name in MAPS
            t = len(rows_kept) if selected and rows_kept is not None else n
            s = len(keys_kept) if selected and keys_kept is not None else n
            axes = QUANTITIES[name].axes
            cut = tuple({"T": slice(0, t), "S": slice(0, s)}.get(a, slice(None)) for a in axes)
            assert np.array_equal(cap.tensors[name], full[cut]), (pos, name)
            if spec.dtype == "uint8":
                want = (PROBABILITY_SCALE, 0.0)
                if "scale" in blocks[name]:
                    want = (
                        float(blocks[name]["scale"].row(r)),
                        float(blocks[name]["offset"].row(r)),
                    )
                assert cap.quantization[name] == want, (pos, name)


def test_a_position_outside_a_text_names_the_first_such_text_among_repeated_lengths(engines):
    from jaxattn.errors import UsageError

    engine = engines["bert"]
    spec = engine.make_spec("attention", query_positions=[4])
    spec.check_examples([(0, 5), (1, 5), (2, 6)])  # every text holds position 4
    for lengths, named in [([5, 5, 3, 4], 2), ([6, 3, 6, 3], 1), ([4], 0)]:
        with pytest.raises(UsageError, match="4") as raised:
            spec.check_examples(enumerate(lengths))
        assert raised.value.index == named
