"""Analyses from the attention papers, on numpy arrays (no jax, flax or torch).

Runs wherever `Capture` objects are: beside the engine, or on a client that got
them over gRPC. Every function's docstring names its paper and the definition.

    from jaxattn import analysis

    # one pass over a corpus, nothing kept in memory but the sums
    corpus = analysis.CorpusAnalysis()
    for cap, sent in zip(captures, analysis.read_conllu("dev.conllu")):
        corpus.update(cap, sent)
    analysis.write_report(corpus.report(), "report.json")   # + report.md

    # one example
    wmap = analysis.align_words(cap.tokens, sent.words)        # or group_words(cap.tokens)
    words = analysis.word_level_attention(cap.attention, wmap)  # [L, H, U, U], Clark et al.
    stats = analysis.head_statistics(cap.attention, cap.tokens)   # {stat: [L, H]}
    classes = analysis.kovaleva_classes(cap.attention, cap.tokens, cap.sentence_b_start)
    r = analysis.rollout(cap, kind="norm")                      # [L, T, T], Abnar & Zuidema
    f = analysis.flow(cap)                                      # [L, T, T], max-flow (scipy)
    mix = analysis.MixingRatios(); mix.update(cap); mix.result()  # {measure: [L]}

Modules: `tokens` (special tokens, piece schemes), `words` (word-level
attention), `weights` (attention vs norm-based weights),
`head_stats`, `head_distance` (Jensen-Shannon, MDS), `patterns` (Kovaleva, Vig),
`dependency` and `dependency_rules` (Clark et al. Table 1), `rollout` and
`flow` (Abnar & Zuidema), `mixing` (Kobayashi et al. 2021 context-mixing
ratios), `decoder` (sinks, previous/duplicate/induction heads), `ov_circuit`
(copying scores from the weights), `bos_sinks` (the sink with and without BOS:
it drives an engine it is handed, importing none), `report` and `markdown`.
Head ablation runs the model on the device, so it lives beside the engine:
`jaxattn.engine.ablation` (and its losses, `engine.mlm`, `engine.causal_lm`).
The CoNLL-U reader is an input format: `jaxattn.inputs` (re-exported here).
"""

from jaxattn.analysis.decoder import (
    AttentionSinks,
    BosSinks,
    DecoderHeads,
    bos_sink_shares,
    decoder_head_statistics,
    duplicate_token_scores,
    first_token_scores,
    induction_scores,
    previous_token_scores,
    repeated_sequence_text,
)
from jaxattn.analysis.dependency import DependencyHeads
from jaxattn.analysis.dependency_rules import CLARK_DIRECTIONS, DIRECTIONS, argmax_guesses
from jaxattn.analysis.flow import FlowStats, attention_flow, flow
from jaxattn.analysis.head_distance import HeadDistance, classical_mds, js_divergence_sum
from jaxattn.analysis.head_stats import HEAD_STATS, HeadStats, head_statistics, row_entropy
from jaxattn.analysis.markdown import render_markdown
from jaxattn.analysis.mixing import MEASURES as MIXING_MEASURES
from jaxattn.analysis.mixing import MIXING_NEEDS, MixingRatios, mixing_ratio_rows
from jaxattn.analysis.ov_circuit import copying_score, model_copying_scores
from jaxattn.analysis.patterns import (
    KOVALEVA_CLASSES,
    VIG_PATTERNS,
    PatternCounts,
    kovaleva_classes,
    vig_patterns,
)
from jaxattn.analysis.report import CorpusAnalysis, build_report, write_report
from jaxattn.analysis.rollout import (
    RolloutStats,
    attention_rollout,
    residual_attention,
    rollout,
)
from jaxattn.analysis.tokens import (
    BERT_SPECIALS,
    ROBERTA_SPECIALS,
    SpecialTokens,
    detect_specials,
    display_token,
    display_tokens,
    normalise_text,
    readable_text,
)
from jaxattn.analysis.weights import WEIGHT_KINDS, capture_weights, normalise_rows
from jaxattn.analysis.words import (
    WORD_ROWS,
    WordMap,
    align_words,
    group_words,
    word_level_attention,
)
from jaxattn.inputs.conllu import Sentence, coarse_relation, read_conllu

__all__ = [
    "AttentionSinks",
    "BosSinks",
    "DecoderHeads",
    "bos_sink_shares",
    "copying_score",
    "model_copying_scores",
    "decoder_head_statistics",
    "duplicate_token_scores",
    "first_token_scores",
    "induction_scores",
    "previous_token_scores",
    "repeated_sequence_text",
    "BERT_SPECIALS",
    "CLARK_DIRECTIONS",
    "DIRECTIONS",
    "HEAD_STATS",
    "KOVALEVA_CLASSES",
    "MIXING_MEASURES",
    "MIXING_NEEDS",
    "MixingRatios",
    "mixing_ratio_rows",
    "ROBERTA_SPECIALS",
    "VIG_PATTERNS",
    "display_token",
    "display_tokens",
    "readable_text",
    "WEIGHT_KINDS",
    "WORD_ROWS",
    "CorpusAnalysis",
    "DependencyHeads",
    "FlowStats",
    "HeadDistance",
    "HeadStats",
    "PatternCounts",
    "RolloutStats",
    "Sentence",
    "SpecialTokens",
    "WordMap",
    "align_words",
    "argmax_guesses",
    "attention_flow",
    "attention_rollout",
    "build_report",
    "capture_weights",
    "classical_mds",
    "coarse_relation",
    "detect_specials",
    "flow",
    "group_words",
    "head_statistics",
    "js_divergence_sum",
    "kovaleva_classes",
    "normalise_rows",
    "normalise_text",
    "read_conllu",
    "render_markdown",
    "residual_attention",
    "rollout",
    "row_entropy",
    "vig_patterns",
    "word_level_attention",
    "write_report",
]
