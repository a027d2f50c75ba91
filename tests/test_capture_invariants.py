"""Capture invariants: probabilities, selection, batching, output dtypes, bad input, order.

Values are compared with torch (test_parity) elsewhere; here with properties
that must hold whatever the values are. Each new capture spec or (bucket,
batch size) shape costs a compile, so most checks run on BERT only and reuse
the conftest's full captures.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hf_fixtures import EXAMPLE_A, long_text, torch_reference

from jaxattn.errors import JaxattnError, TooLongError, UsageError
from jaxattn.quantities import COMMON, QUANTITIES

ALL = COMMON
LIGHT = ("attention", "scores", "hidden_states")
# "Bucketing/padding does not change values" beyond rounding: XLA's CPU kernels
# depend on the batch shape (and the CPU: AVX2 vs AVX-512 paths), so float32
# results differ in the last bits (1.4e-6 absolute seen on hidden states); 1e-5 is
# far below any real error (a wrong mask or position moves values by 1e-2 or more).
CLOSE = dict(rtol=1e-5, atol=1e-5)
SPECIALS = {
    "bert": ("[CLS]", "[SEP]"),
    "distilbert": ("[CLS]", "[SEP]"),
    "roberta": ("<s>", "</s>"),
}


@pytest.fixture(scope="module")
def bert(engines):
    return engines["bert"]


@pytest.fixture(scope="module")
def alone(bert):
    """EXAMPLE_A and "" each captured in a call of its own (batch of 1, bucket 8)."""
    return {t: bert.capture([t], what=ALL)[0] for t in (EXAMPLE_A, "")}


def test_attention_rows_sum_to_one(full_captures, family):
    for cap in full_captures[family]:
        np.testing.assert_allclose(cap.attention.sum(-1), 1.0, atol=1e-5, rtol=0)
        assert (cap.attention >= 0).all()


def test_alpha_fx_norm_is_attention_times_fx_norm(full_captures, family):
    for cap in full_captures[family]:
        want = cap.attention * cap.fx_norm[:, :, None, :]
        np.testing.assert_allclose(cap.alpha_fx_norm, want, rtol=1e-6, atol=1e-7)


def test_empty_string_is_cls_sep(full_captures, engines, family):
    cap = full_captures[family][1]
    assert cap.tokens == SPECIALS[family]
    info = engines[family].info
    assert cap.attention.shape == (info.layers, info.heads, 2, 2)
    assert cap.sentence_b_start is None


def test_selection_equals_full_capture_sliced(bert, full_captures, standard_texts):
    texts = standard_texts["bert"][:2]  # same (bucket, batch) shape as the full capture
    what = ("attention", "queries", "fx_norm", "sum_alpha_fx_norm", "hidden_states")
    caps = bert.capture(texts, what=what, layers=[2, 0], heads=[1])
    for cap, full in zip(caps, full_captures["bert"][:2], strict=True):
        assert cap.layers == (0, 2) and cap.heads == (1,)
        assert set(cap.what) == set(what)
        t = cap.length
        assert cap.attention.shape == (2, 1, t, t)
        assert cap.queries.shape == (2, 1, t, bert.info.head_dim)
        assert cap.fx_norm.shape == (2, 1, t)
        assert cap.sum_alpha_fx_norm.shape == (2, t, t)
        assert cap.hidden_states.shape == (3, t, bert.info.hidden)
        for name in ("attention", "queries", "fx_norm"):
            np.testing.assert_allclose(
                getattr(cap, name), getattr(full, name)[[0, 2]][:, [1]], **CLOSE, err_msg=name
            )
        # sum_alpha_fx_norm sums over ALL heads of the layer, whatever `heads` says.
        np.testing.assert_allclose(cap.sum_alpha_fx_norm, full.sum_alpha_fx_norm[[0, 2]], **CLOSE)
        # Embeddings output, then the output of layers 0 and 2.
        np.testing.assert_allclose(cap.hidden_states, full.hidden_states[[0, 1, 3]], **CLOSE)
        with pytest.raises(AttributeError):
            _ = cap.keys  # not asked for


def test_batch_equals_alone(alone, full_captures):
    """A text captured alone equals the same text bucketed and padded with others."""
    for i, text in enumerate((EXAMPLE_A, "")):
        full = full_captures["bert"][i]
        assert alone[text].tokens == full.tokens
        for name in ALL:
            np.testing.assert_allclose(
                getattr(alone[text], name),
                getattr(full, name),
                **CLOSE,
                err_msg=f"{name} of {text!r}",
            )


def test_results_in_input_order(bert, full_captures, standard_texts):
    texts = standard_texts["bert"]
    order = [2, 3, 1, 0]
    caps = bert.capture([texts[i] for i in order], what=ALL)
    assert len(caps) == len(order)
    for cap, i in zip(caps, order, strict=True):
        want = full_captures["bert"][i]
        assert cap.tokens == want.tokens
        for name in ALL:
            np.testing.assert_allclose(getattr(cap, name), getattr(want, name), **CLOSE)


@pytest.mark.parametrize(
    "dtype, rel, floor",
    [
        # dtypes.py: float16 relative <= 2^-11 in its normal range (below it, the
        # subnormal spacing 2^-24 bounds the absolute error); bfloat16 relative <= 2^-8.
        ("float16", 2.0**-11, 2.0**-24),
        ("bfloat16", 2.0**-8, 1e-37),
    ],
)
def test_float_encodings_within_documented_error(bert, dtype, rel, floor):
    texts = [EXAMPLE_A]
    ref = bert.capture(texts, what=LIGHT)[0]
    cap = bert.capture(texts, what=LIGHT, dtype=dtype)[0]
    want_dtype = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    assert cap.dtype == dtype
    for name in LIGHT:
        got, x = getattr(cap, name), getattr(ref, name)
        assert got.dtype == want_dtype, name
        err = np.abs(got.astype(np.float64) - x)
        assert (err <= rel * np.abs(x) + floor).all(), (name, err.max())


def test_uint8_within_documented_error(bert):
    texts = [EXAMPLE_A]
    ref = bert.capture(texts, what=LIGHT)[0]
    cap = bert.capture(texts, what=LIGHT, dtype="uint8")[0]
    raw, _, _ = cap.encoded("attention")
    assert raw.dtype == np.uint8
    # Probability-valued: q = round(255 x), |x - q / 255| <= 1/510.
    assert cap.attention.dtype == np.float32
    assert np.abs(cap.attention - ref.attention).max() <= 1 / 510 + 1e-7
    # Others: per (example, tensor) min/max over real positions: error <= (max - min) / 510.
    for name in ("scores", "hidden_states"):
        x = getattr(ref, name)
        bound = (x.max() - x.min()) / 510
        assert np.abs(getattr(cap, name) - x).max() <= bound * (1 + 1e-5) + 1e-6, name


def test_empty_list(bert):
    assert bert.capture([]) == []
    maps = [q for q in ALL if QUANTITIES[q].uint8]  # the statistics and mixing norms have none
    assert bert.capture([], what=maps, dtype="uint8") == []


def test_too_long_raises_naming_length_and_limit(engines, tokenizers, family):
    text = long_text(tokenizers[family], 80)
    n = len(tokenizers[family](text)["input_ids"])
    with pytest.raises(TooLongError, match=rf"(?s)(\b{n}\b.*\b67\b|\b67\b.*\b{n}\b)"):
        engines[family].capture(["short", text])


def test_truncate_cuts_to_the_limit_and_matches_torch(bert, tokenizers, torch_models):
    tok = tokenizers["bert"]
    text = long_text(tok, 80)
    (cap,) = bert.capture([text], what=LIGHT, too_long="truncate")
    assert cap.length == 67 and cap.tokens[0] == "[CLS]" and cap.tokens[-1] == "[SEP]"
    enc = tok([text], truncation=True, max_length=67, return_tensors="pt")
    assert list(cap.tokens) == tok.convert_ids_to_tokens(enc["input_ids"][0].tolist())
    ref = torch_reference(torch_models["bert"], "bert", enc)
    np.testing.assert_allclose(cap.attention, ref["attention"][0], atol=1e-5, rtol=0)
    np.testing.assert_allclose(cap.hidden_states, ref["hidden_states"][0], atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(layers=[3]), "3"),
        (dict(layers=[-4]), "-4"),  # -3..-1 count from the end
        (dict(heads=[3]), "3"),
        (dict(layers=[0, 5]), "5"),
        (dict(what=("attentions",)), "attention"),  # names the valid choices
        (dict(what=("attention", "bogus")), "bogus"),
        (dict(dtype="int8"), "int8"),
    ],
)
def test_bad_request_raises_value_error(bert, kwargs, needle):
    with pytest.raises(UsageError, match=needle):
        bert.capture([EXAMPLE_A], **kwargs)


@pytest.mark.parametrize(
    "texts",
    [[5], [None], ["ok", 3.5], [("only one",)], [("a", "b", "c")], [("a", 5)], [b"bytes"]],
    ids=["int", "none", "float-after-ok", "1-tuple", "3-tuple", "pair-with-int", "bytes"],
)
def test_non_string_text_raises_value_error(bert, texts):
    with pytest.raises(UsageError):
        bert.capture(texts)


def test_engine_survives_bad_input(bert, alone, tokenizers):
    for bad in ([5], [long_text(tokenizers["bert"], 80)]):
        with pytest.raises(JaxattnError):  # a UsageError, a TooLongError
            bert.capture(bad, what=ALL)
    (cap,) = bert.capture([EXAMPLE_A], what=ALL)
    np.testing.assert_array_equal(cap.attention, alone[EXAMPLE_A].attention)
