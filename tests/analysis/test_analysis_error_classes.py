"""The analyses' refusals are jaxattn errors of the right kind (docs/errors.md): a bad
argument or a capture that lacks what the analysis needs is a UsageError, words a
sentence's tokens do not spell an InputError, a tokenizer without BOS a
CheckpointError (a table of another version's statistics, a CaptureFileError:
test_analysis_head_stats.py). Refusals the analyses' own test files ask for by class
without a model are not repeated here."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from analysis_helpers import identity, make_capture

from jaxattn.analysis.bos_sinks import bos_variants
from jaxattn.analysis.decoder import (
    AttentionSinks,
    BosSinks,
    DecoderHeads,
    repeated_sequence_text,
)
from jaxattn.analysis.dependency import DependencyHeads
from jaxattn.analysis.flow import FlowStats, attention_flow
from jaxattn.analysis.head_distance import HeadDistance
from jaxattn.analysis.head_stats import HeadStats, head_statistics
from jaxattn.analysis.mixing import MixingRatios
from jaxattn.analysis.ov_circuit import unembed_embed
from jaxattn.analysis.patterns import PatternCounts, kovaleva_classes, vig_patterns
from jaxattn.analysis.report import CorpusAnalysis
from jaxattn.analysis.rollout import attention_rollout
from jaxattn.analysis.tokens import SpecialTokens
from jaxattn.analysis.weights import capture_weights
from jaxattn.analysis.words import WordMap, align_words, group_words, word_level_attention
from jaxattn.capture import Capture
from jaxattn.errors import (
    CheckpointError,
    InputError,
    JaxattnError,
    UsageError,
)

BERT = SpecialTokens()


def _stats_only(stats: np.ndarray | None) -> Capture:
    """A capture holding only the on-device head_stats table (None: nothing; no maps)."""
    return Capture(
        tokens=("[CLS]", "a", "[SEP]"),
        sentence_b_start=None,
        layers=(0,),
        heads=(0,),
        dtype="float32",
        tensors={} if stats is None else {"head_stats": np.asarray(stats, np.float32)},
    )


def _feed(acc, *examples):
    for example in examples:
        acc.update(*example) if isinstance(example, tuple) else acc.update(example)


class _Tokenizer:
    """A tokenizer whose words each encode back to themselves, but not when joined."""

    def get_vocab(self):
        return {"Ġab": 0, "Ġcd": 1}

    def convert_tokens_to_string(self, tokens):
        return "".join(t.replace("Ġ", " ") for t in tokens)

    def encode(self, text, add_special_tokens=False):
        words = text.split()
        return [0 if w == "ab" else 1 for w in words] if len(words) == 1 else [9]


ONE = make_capture(identity())
CAUSAL2, CAUSAL3 = (np.tril(np.ones((t, t))) / np.arange(1, t + 1)[:, None] for t in (2, 3))
DECODER_CAP = make_capture(CAUSAL3, tokens=["a", "b", "c"], sentence_b_start=None)
DECODER_WIDE = make_capture(
    np.broadcast_to(CAUSAL3, (1, 2, 3, 3)), tokens=["a", "b", "c"], sentence_b_start=None
)
NO_MAPS = _stats_only(None)

CASES = [
    # every accumulator's update: None (capture_iter's progress for a skipped text) was
    # an AttributeError ('NoneType' object has no attribute 'layers')
    *(
        (
            f"{cls.__name__}.update(None)",
            UsageError,
            r"an analysis's update takes one Capture, got NoneType \(capture_iter's progress",
            lambda cls=cls: cls().update(None),
        )
        for cls in (HeadStats, PatternCounts, HeadDistance, MixingRatios, FlowStats, DecoderHeads)
    ),
    (  # [L, H, 1, T] rows broadcast against the identity: a [L, T, T] result, silently
        "rollout: rows of maps",
        UsageError,
        r"weights must be \[..., T, T\] maps, got shape \(1, 1, 1, 19\) \(a capture of",
        lambda: attention_rollout(identity()[None, None, -1:]),
    ),
    (  # a numpy broadcasting ValueError
        "flow: no head axis",
        UsageError,
        r"weights must be \[L, H, T, T\] maps, got shape \(1, 19, 19\)",
        lambda: attention_flow(identity()[None]),
    ),
    (  # einsum broadcast the one row: a [..., U, U] result, silently
        "word level: rows of maps",
        UsageError,
        r"weights must be \[..., T, T\] maps, got shape \(1, 1, 1, 3\)",
        lambda: word_level_attention(
            np.full((1, 1, 1, 3), 1 / 3), group_words(["[CLS]", "a", "[SEP]"], BERT)
        ),
    ),
    (
        "rollout: residual",
        UsageError,
        r"residual must be a number \(0.5 in the paper\), got '0.5'",
        lambda: attention_rollout(identity()[None, None], residual="0.5"),
    ),
    (  # its docstring said either capture may be None: an AttributeError for the first
        "attention sinks: no first capture",
        UsageError,
        "AttentionSinks takes one Capture, got NoneType",
        lambda: AttentionSinks(None, DECODER_CAP),
    ),
    (  # an AttributeError: 'str' object has no attribute 'words'
        "dependency heads: no sentence",
        UsageError,
        r"need each capture's parsed sentence \(a Sentence of read_conllu\), got str",
        lambda: DependencyHeads().update(ONE, "a b"),
    ),
    # mixing.py
    (
        "mixing: layers differ",
        UsageError,
        "differ from earlier",
        lambda: _feed(MixingRatios(), ONE, make_capture(np.stack([identity()] * 2)[:, None])),
    ),
    # report.py, patterns.py, head_distance.py: a result before any example
    ("report: no example", UsageError, "saw no example", lambda: CorpusAnalysis().report()),
    ("patterns: no example", UsageError, "saw no example", lambda: PatternCounts().result()),
    ("head distance: no example", UsageError, "saw no example", lambda: HeadDistance().result()),
    # words.py
    (
        "word rows: tokens",
        UsageError,
        "weights have 3 tokens, the word map 2",
        lambda: word_level_attention(
            np.eye(3), WordMap(units=("a",), token_unit=np.array([0, 0]), unit_word=np.array([0]))
        ),
    ),
    (
        "align: no characters",
        InputError,
        "no characters",
        lambda: align_words(["[UNK]"], [""], BERT),
    ),
    (
        "align: unknown then lost",
        InputError,
        "not found after an unknown token",
        lambda: align_words(["[UNK]", "zz"], ["abc"], BERT),
    ),
    (
        "align: mismatch",
        InputError,
        "does not match the words at character 0",
        lambda: align_words(["xy"], ["abc"], BERT),
    ),
    (
        "align: uncovered",
        InputError,
        "the tokens cover 2 of the words' 3 characters",
        lambda: align_words(["ab"], ["abc"], BERT),
    ),
    # head_stats.py
    (
        "head stats: tokens",
        UsageError,
        "2 tokens for weights over 19 positions",
        lambda: head_statistics(identity()[None, None], ["a", "b"]),
    ),
    (  # a capture's selected query row, [L, H, 1, T]: an IndexError inside
        "head stats: rows of maps",
        UsageError,
        r"weights must be \[..., T, T\] maps, got shape \(1, 1, 1, 19\) .*query/key positions",
        lambda: head_statistics(identity()[None, None, -1:], ["a"] * 19),
    ),
    (
        "kovaleva: no array",
        UsageError,
        r"weights must be \[..., T, T\] maps, got shape \(\)",
        lambda: kovaleva_classes(None, ["a"], None),
    ),
    (
        "vig: rows of maps",
        UsageError,
        r"weights must be \[..., T, T\] maps, got shape \(19,\)",
        lambda: vig_patterns(identity()[0], ["a"] * 19, None),
    ),
    (
        "head stats: custom specials without maps",
        UsageError,
        "custom specials need the maps",
        lambda: HeadStats(specials=BERT).update(_stats_only(np.zeros((1, 1, 10)))),
    ),
    # weights.py
    (
        "weights: unknown kind",
        UsageError,
        "unknown weight kind 'grad'",
        lambda: capture_weights(ONE, "grad"),
    ),
    (
        "weights: missing quantity",
        UsageError,
        "'norm' weights need the 'alpha_fx_norm'",
        lambda: capture_weights(ONE, "norm"),
    ),
    # decoder.py
    (
        "decoder: no maps nor table",
        UsageError,
        "neither attention nor decoder_head_stats",
        lambda: AttentionSinks(NO_MAPS),
    ),
    (
        "decoder: layouts differ",
        UsageError,
        "after ones with",
        lambda: _feed(DecoderHeads(), DECODER_CAP, DECODER_WIDE),
    ),
    (
        "decoder: needs attention",
        UsageError,
        "needs attention or decoder_head_stats",
        lambda: DecoderHeads().update(NO_MAPS),
    ),
    (
        "bos sinks: layouts differ",
        UsageError,
        "after ones with",
        lambda: _feed(
            BosSinks(),
            (CAUSAL3[None, None], CAUSAL2[None, None]),
            (np.broadcast_to(CAUSAL3, (1, 2, 3, 3)), np.broadcast_to(CAUSAL2, (1, 2, 2, 2))),
        ),
    ),
    (  # an AttributeError: 'Engine' object has no attribute 'get_vocab'
        "repeated sequence: an engine",
        UsageError,
        r"takes a Hugging Face tokenizer \(an engine's: engine.tokenizer.hf\), got SimpleNamespace",
        lambda: repeated_sequence_text(SimpleNamespace(tokenizer=_Tokenizer()), 2),
    ),
    (  # a TypeError comparing '5' with 2
        "repeated sequence: n",
        UsageError,
        "n must be a whole number of random tokens, got '5'",
        lambda: repeated_sequence_text(_Tokenizer(), "5"),
    ),
    (
        "repeated sequence: round trip",
        CheckpointError,
        "does not encode the repeated sequence",
        lambda: repeated_sequence_text(_Tokenizer(), 2),
    ),
    # bos_sinks.py
    (
        "bos sinks: no BOS token",
        CheckpointError,
        "the tokenizer of gpt has no BOS token",
        lambda: bos_variants(
            SimpleNamespace(
                config=SimpleNamespace(causal=True, name="gpt"),
                tokenizer=SimpleNamespace(hf=SimpleNamespace(bos_token_id=None, bos_token=None)),
            ),
            [],
        ),
    ),
    # ov_circuit.py
    (
        "ov: shapes",
        UsageError,
        r"the unembedding \(4, 3\) and the embedding \(5, 3\)",
        lambda: unembed_embed(np.zeros((4, 3)), np.zeros((5, 3))),
    ),
]


@pytest.mark.parametrize(("name", "cls", "match", "call"), CASES, ids=[c[0] for c in CASES])
def test_each_refusal_is_a_jaxattn_error_of_its_kind(name, cls, match, call):
    with pytest.raises(cls, match=match) as err:
        call()
    assert isinstance(err.value, JaxattnError) and isinstance(err.value, ValueError)
