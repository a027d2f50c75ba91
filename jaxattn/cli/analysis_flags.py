"""The flags of `jaxattn analyze` that shape its analyses, and the analysis they give.

The dependency-head flags pick a variant of Clark et al. 2019's definitions
(`jaxattn.analysis.dependency`, the defaults): the released code's first-piece
rows, this library's earlier head-row reading, no possessive rule, another
baseline range. The flow flags bound attention flow's O(T^4) cost. Shared by the
model and the saved-captures runs of analyze (`corpus_analysis`). The analysis
names are spelled here, not imported, so that building the CLI's parser does not
load `jaxattn.analysis`; tests/analysis/test_analysis_cli.py checks them
against the analysis tables.
"""

from __future__ import annotations

import argparse

from jaxattn.cli.args import names, positive
from jaxattn.errors import UsageError

WORD_ROWS = ("mean", "first")  # jaxattn.analysis.WORD_ROWS
DIRECTIONS = ("dep_to_head", "head_to_dep", "head_row")  # jaxattn.analysis.DIRECTIONS
CLARK_DIRECTIONS = DIRECTIONS[:2]  # jaxattn.analysis.CLARK_DIRECTIONS
BASELINE_OFFSETS = (-3, 2)  # jaxattn.analysis.dependency_rules.BASELINE_OFFSETS
FLOW_MAX_TOKENS = 40  # jaxattn.analysis.flow.MAX_TOKENS


def directions(value: str) -> tuple[str, ...]:
    """'dep_to_head,head_row' -> the distinct direction names, checked."""
    out = names(value)
    bad = [d for d in out if d not in DIRECTIONS]
    if bad or len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(
            f"{value!r}: give distinct names among {', '.join(DIRECTIONS)}"
        )
    return out


def add_dependency_arguments(p) -> None:
    """--word-rows, --directions, --no-possessive-rule, --baseline-offsets."""
    p.add_argument(
        "--word-rows",
        choices=WORD_ROWS,
        default="mean",
        help="a split word's attention to the other words: the mean of its pieces' rows "
        "(Clark et al.'s paper, section 4.1; default) or its first piece's row (the default "
        "of their released code, bpe_utils.py)",
    )
    p.add_argument(
        "--directions",
        type=directions,
        default=CLARK_DIRECTIONS,
        metavar="LIST",
        help="the readings that compete for each relation's best head: dep_to_head (the "
        "dependent's most-attended word is its head), head_to_dep (the word that attends "
        "most to the dependent is its head; Clark et al.'s transposed map), head_row (the "
        "head's most-attended word is the dependent: jaxattn 0.2's head_to_dep)",
    )
    p.add_argument(
        "--no-possessive-rule",
        action="store_true",
        help="score a possessor (nmod:poss, poss) by its own guess, not by the guess of the "
        "'s that follows it (Clark et al.'s rule, on by default)",
    )
    p.add_argument(
        "--baseline-offsets",
        type=int,
        nargs=2,
        default=BASELINE_OFFSETS,
        metavar=("LOW", "HIGH"),
        help="the offsets k the baseline head = dependent + k tries, both included, clamped "
        "to the sentence (default: -3 2, Clark et al.'s)",
    )


def dependency_options(args) -> dict:
    """The `jaxattn.analysis.DependencyHeads` options the flags give.

    Raises:
      UsageError: a lower offset after a higher one, or a variant chosen with
        --stats-only, which makes no dependency table.
    """
    low, high = args.baseline_offsets
    chosen = [
        flag
        for flag, on in (
            ("--word-rows", args.word_rows != "mean"),
            ("--directions", tuple(args.directions) != CLARK_DIRECTIONS),
            ("--no-possessive-rule", args.no_possessive_rule),
            ("--baseline-offsets", (low, high) != BASELINE_OFFSETS),
        )
        if on
    ]
    if chosen and args.stats_only:
        raise UsageError(
            f"{', '.join(chosen)} choose how the dependency table is scored; "
            "--stats-only makes none: drop one or the other"
        )
    if low > high:
        raise UsageError(f"--baseline-offsets {low} {high}: give the lower offset first")
    return {
        "rows": args.word_rows,
        "directions": tuple(args.directions),
        "possessive": not args.no_possessive_rule,
        "offsets": (low, high),
    }


def add_flow_arguments(p) -> None:
    """--flow, --flow-max-tokens."""
    p.add_argument(
        "--flow",
        type=positive,
        metavar="N",
        help="also attention flow (Abnar & Zuidema 2020) over the first N examples: T^2 "
        "max-flow problems per layer, growing as T^4 (about 0.1 s for a 17-token example, 1 s "
        "for 32 tokens, per weight kind on a CPU core)",
    )
    p.add_argument(
        "--flow-max-tokens",
        type=positive,
        default=FLOW_MAX_TOKENS,
        metavar="T",
        help=f"skip examples longer than T in the flow (default {FLOW_MAX_TOKENS}; counted in "
        "report.json meta.flow_skipped)",
    )


def corpus_analysis(args, decoder: bool = False, family: str | None = None):
    """The `jaxattn.analysis.CorpusAnalysis` the flags ask for (UsageError as
    `dependency_options`); `decoder`: a causal model's analyses; `family`: the model's
    (ModelInfo.family, a capture's provenance), whose table says where its norms sit,
    for captures that carry no config (a server's: meta.pre_norm)."""
    from jaxattn.analysis import CorpusAnalysis
    from jaxattn.checkpoints.families import norm_of

    return CorpusAnalysis(
        decoder=decoder,
        pre_norm=norm_of(family or "") == "pre",
        head_distance=not args.no_head_distance,
        coarse_relations=args.coarse_relations,
        head_stats_only=args.stats_only,
        dependency=dependency_options(args),
        flow_examples=args.flow or 0,
        flow_max_tokens=args.flow_max_tokens,
    )
