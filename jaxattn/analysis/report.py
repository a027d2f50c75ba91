"""One pass over a corpus for every analysis, and the report.json it produces.

    analysis = CorpusAnalysis()
    for cap, sentence in zip(captures, sentences):   # any iterable; nothing is kept
        analysis.update(cap, sentence)                # sentence: a CoNLL-U Sentence or None
    report = analysis.report(meta={"model": "all-MiniLM-L6-v2"})
    write_report(report, "report.json")               # and report.md beside it

report.json keys (layers and heads 0-indexed, as captured):
- ``meta``: examples, tokens, layers, heads, the definitions' thresholds,
  ``uniform_entropy`` (ln T averaged over the examples: Clark et al.'s reference
  for the head entropies), ``dependency`` (the dependency table's settings: word
  rows, directions, possessive rule, baseline offsets), ``pre_norm`` (true when a
  capture's model config says pre-norm, ModernBERT's or a decoder's: report.md reads
  the mixing table's AttnResLn-N so; absent through a server, whose captures carry no
  config, where a decoder still reads pre-norm), and anything the caller adds;
- ``head_stats``: {stat: [L][H]} (`jaxattn.analysis.head_stats`; ``norm_*`` for
  norm-based weights);
- ``patterns``: {class or pattern: [L] fractions} (`jaxattn.analysis.patterns`);
- ``mixing_ratios``: {measure: [L]} (Kobayashi et al. 2021,
  `jaxattn.analysis.mixing`), for each measure whose quantity was captured;
- ``dependency_heads`` (with parsed sentences): {"all" or relation: {...}}
  (`jaxattn.analysis.dependency`), and ``dependency_heads_norm`` with
  norm-based weights; without parses, ``meta.not_run.dependency_heads`` says why;
- ``head_distance``: {"js_divergence": [N][N], "mds": [L][H][2]};
- ``rollout``: {kind: {stat: [L]}} (`jaxattn.analysis.rollout`);
- ``flow`` (when asked: ``flow_examples``): {kind: {stat: [L]}}, the same
  statistics of attention flow (`jaxattn.analysis.flow`), with
  ``meta.flow_examples`` and ``meta.flow_skipped`` (longer than ``flow_max_tokens``).

A decoder (``CorpusAnalysis(decoder=True)``; `jaxattn analyze` on a causal model)
gets ``decoder_heads`` instead: {stat: [L][H]} (`jaxattn.analysis.decoder`: the
first-token share, previous token, self, punctuation, entropy, then induction
and duplicate-token scores; ``norm_*`` for norm-based weights), beside
``mixing_ratios`` and ``head_distance`` (over each example's query rows 1 .. T-1:
`MixingRatios` and `HeadDistance` with ``causal``); the encoder sections that read
[CLS]/[SEP] (head_stats, patterns, rollout, flow, dependency heads) are left
out, each with its one-line reason in ``meta.not_run``. `jaxattn analyze` adds
``ov_copying`` ({"definition", "score": [L][H]}, `jaxattn.analysis.ov_circuit`)
and ``bos_sinks`` ({"bos_token", "examples", "skipped", "bos",
"first_after_bos", "first_without_bos", "shift": [L][H]},
`jaxattn.analysis.bos_sinks`) from a local engine, and ``head_ablation`` with
``lm_loss``/``lm_loss_delta`` (`jaxattn.engine.ablation`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

import jaxattn.analysis.patterns as _patterns
from jaxattn import outfile
from jaxattn.analysis.decoder import DecoderHeads
from jaxattn.analysis.dependency import DependencyHeads
from jaxattn.analysis.flow import MAX_TOKENS as FLOW_MAX_TOKENS
from jaxattn.analysis.flow import FlowStats
from jaxattn.analysis.head_distance import HeadDistance
from jaxattn.analysis.head_stats import HeadStats
from jaxattn.analysis.markdown import render_markdown
from jaxattn.analysis.mixing import MixingRatios
from jaxattn.analysis.patterns import PatternCounts
from jaxattn.analysis.rollout import RolloutStats, from_input
from jaxattn.analysis.tokens import SpecialTokens
from jaxattn.analysis.weights import available_kinds
from jaxattn.capture import Capture
from jaxattn.errors import UsageError
from jaxattn.inputs.conllu import Sentence

# Why the dependency-head table is missing (meta.not_run.dependency_heads); a caller's
# meta may say it in its own terms (`jaxattn analyze`: --conllu).
NO_PARSE = "no parsed sentence was given (a CoNLL-U parse: update(capture, sentence))"
NO_PARSE_STATS = "head statistics only: no attention map to score against a parse"
# Why a decoder's report leaves out the encoder sections (meta.not_run).
DECODER_NOT_RUN = {
    "head_stats": "a decoder (causal) model: Clark et al.'s statistics name [CLS]/[SEP]; "
    "see decoder_heads",
    "patterns": "a decoder (causal) model: Kovaleva's and Vig's classes read a full "
    "(bidirectional) map and [CLS]/[SEP]",
    "rollout": "a decoder (causal) model: its statistics are of [CLS] and [SEP]",
    "flow": "a decoder (causal) model: its statistics are of [CLS] and [SEP]",
    "dependency_heads": "a decoder (causal) model: query i sees no word after it, so "
    "Clark et al.'s dependency directions are not defined",
}


class CorpusAnalysis:
    """Streams head statistics, patterns, head distances, rollout and dependency heads.

    Args:
      specials: special-token strings; detected per example when None.
      head_distance: compute the JS divergence between heads (O(N^2 T^2) per example).
      distance_max_tokens: skip longer examples in the head distance.
      coarse_relations: group dependency relations by their universal label.
      dependency: further `DependencyHeads` options (rows, directions,
        possessive, offsets); Clark et al.'s definitions when None.
      head_stats_only: only the head statistics, from captures that may hold
        just the engine's ``head_stats`` / ``norm_head_stats`` (no maps).
      flow_examples: attention flow over the first this many examples (0: none;
        O(L^2 T^4) per example, see `jaxattn.analysis.flow`).
      flow_max_tokens: skip longer examples in the flow.
      decoder: a decoder (causal) model: the decoder analyses (`DecoderHeads`),
        head distance and mixing ratios, not the [CLS]/[SEP] sections.
      pre_norm: the model normalises each block's input (x + f(LN(x)), ModernBERT):
        meta.pre_norm, as a capture whose config says norm "pre" gives it; for
        captures without a config (a server's: `jaxattn analyze` reads it off the
        family, `jaxattn.checkpoints.families.norm_of`).
    """

    def __init__(
        self,
        specials: SpecialTokens | None = None,
        *,
        head_distance: bool = True,
        distance_max_tokens: int | None = 128,
        coarse_relations: bool = False,
        head_stats_only: bool = False,
        dependency: dict | None = None,
        flow_examples: int = 0,
        flow_max_tokens: int | None = FLOW_MAX_TOKENS,
        decoder: bool = False,
        pre_norm: bool = False,
    ):
        self.specials = specials
        self.decoder = DecoderHeads(maps=not head_stats_only) if decoder else None
        self.head_stats = None if decoder else HeadStats(specials)
        self.only_stats = head_stats_only
        self.patterns = None if decoder else PatternCounts("attention", specials)
        wanted = head_distance and not head_stats_only
        self.distance = (
            HeadDistance("attention", distance_max_tokens, causal=decoder) if wanted else None
        )
        self.rollout = None if head_stats_only or decoder else RolloutStats(specials=specials)
        self.flow = None
        if flow_examples and not head_stats_only and not decoder:
            self.flow = FlowStats(
                specials=specials, max_tokens=flow_max_tokens, max_examples=flow_examples
            )
        self.mixing = MixingRatios(causal=decoder)
        self.coarse_relations = coarse_relations
        self.dependency_options = dict(dependency or {})
        self.dependency: dict[str, DependencyHeads] = {}
        self.examples = 0
        self.tokens = 0
        # given, or a capture's model config says norm "pre" (meta.pre_norm)
        self.pre_norm = pre_norm
        self.layout: tuple[tuple[int, ...], tuple[int, ...]] | None = None

    def update(self, capture: Capture, sentence: Sentence | None = None) -> None:
        """Add one example (and its parse, for the dependency heads; a decoder's is unused)."""
        if self.decoder is not None:
            self.decoder.update(capture)
        else:
            self.head_stats.update(capture)
        self.layout = self.layout or (tuple(capture.layers), tuple(capture.heads))
        config = capture.provenance.get("config") or {}
        self.pre_norm = self.pre_norm or config.get("norm") == "pre"
        self.examples += 1
        self.tokens += capture.length
        if self.only_stats:
            return
        if self.patterns is not None:
            self.patterns.update(capture)
        if self.distance is not None:
            self.distance.update(capture)
        if not from_input(capture):  # rollout and flow start at the input: layers 0..L-1
            self.rollout = self.flow = None
        for stats in (self.rollout, self.flow):
            if stats is not None:
                stats.update(capture)
        self.mixing.update(capture)
        if sentence is not None:
            self.add_parse(capture, sentence)

    def add_parse(self, capture: Capture, sentence: Sentence) -> None:
        """Add a parsed sentence to the dependency heads only (a parsed corpus kept apart
        from the examples of the other analyses); a decoder's is left out
        (``DECODER_NOT_RUN``)."""
        if self.decoder is not None:
            return
        for kind in available_kinds(capture):
            if kind not in self.dependency:
                self.dependency[kind] = DependencyHeads(
                    kind,
                    coarse=self.coarse_relations,
                    specials=self.specials,
                    **self.dependency_options,
                )
            self.dependency[kind].update(capture, sentence)

    def report(self, mixing_ratios: dict | None = None, meta: dict | None = None) -> dict:
        """The report.json dict (see the module docstring)."""
        if not self.examples or self.layout is None:
            raise UsageError(
                "the analysis saw no example (every text skipped, or no update): nothing to report"
            )
        if self.decoder is not None:
            return self._decoder_report(mixing_ratios, meta)
        layers, heads = self.head_stats.layout
        info = {
            "examples": self.examples,
            "tokens": self.tokens,
            "uniform_entropy": self.head_stats.uniform_entropy,
            **({"pre_norm": True} if self.pre_norm else {}),
        }
        dep = self.dependency.get("attention") or self.dependency.get("norm")
        if dep is not None:
            info.update(
                parsed_sentences=dep.sentences,
                unaligned_sentences=dep.skipped,
                unaligned_examples=dep.skip_reasons,
                dependency=dep.settings,
            )
        else:  # said in report.md, and by `jaxattn analyze` on stderr
            info["not_run"] = {"dependency_heads": NO_PARSE_STATS if self.only_stats else NO_PARSE}
        if self.distance is not None:
            info["head_distance_skipped"] = self.distance.skipped
        if self.flow is not None:
            info.update(flow_examples=self.flow.examples, flow_skipped=self.flow.skipped)
        info.update(meta or {})
        return build_report(
            layers=layers,
            heads=heads,
            head_stats=self.head_stats.result(),
            patterns={} if self.only_stats else self.patterns.result(),
            mixing_ratios=mixing_ratios if mixing_ratios is not None else self.mixing.result(),
            dependency_heads=dep.result() if dep else None,
            dependency_heads_norm=self.dependency["norm"].result()
            if "norm" in self.dependency
            else None,
            head_distance=self.distance.result()
            if self.distance and self.distance.tokens
            else None,
            rollout=self.rollout.result() if self.rollout else None,
            flow=self.flow.result() if self.flow and self.flow.examples else None,
            meta=info,
        )

    def _decoder_report(self, mixing_ratios: dict | None, meta: dict | None) -> dict:
        layers, heads = self.layout
        info = {
            "examples": self.examples,
            "tokens": self.tokens,
            "decoder": True,
            **({"pre_norm": True} if self.pre_norm else {}),
            "not_run": dict(DECODER_NOT_RUN),
        }
        if self.distance is not None:
            info["head_distance_skipped"] = self.distance.skipped
        info.update(meta or {})
        report = build_report(
            layers=layers,
            heads=heads,
            head_stats={},
            patterns={},
            mixing_ratios=mixing_ratios if mixing_ratios is not None else self.mixing.result(),
            head_distance=self.distance.result()
            if self.distance and self.distance.tokens
            else None,
            meta=info,
        )
        report["decoder_heads"] = _plain(self.decoder.result())
        return report


def json_ready(x):
    """JSON-ready: arrays to nested lists rounded to 6 places, NaN to None (what the
    report's own sections get; for sections a caller adds)."""
    return _plain(x)


def _plain(x):
    """JSON-ready: arrays to nested lists rounded to 6 places, NaN to None."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return _plain(x.tolist())
    if isinstance(x, (float, np.floating)):
        return None if math.isnan(x) else round(float(x), 6)
    if isinstance(x, np.integer):
        return int(x)
    return x


def thresholds() -> dict[str, float]:
    """The pattern rules' named thresholds (recorded in every report's meta)."""
    names = (
        "STRIPE_MIN",
        "STRUCTURED_MIN",
        "MIXED_PART_MIN",
        "BLOCK_MIN",
        "VIG_POSITION_MIN",
        "VIG_IDENTICAL_MIN",
        "VIG_DELIMITER_MIN",
        "VIG_BAG_MIN",
    )
    return {n: getattr(_patterns, n) for n in names}


def build_report(
    *,
    layers,
    heads,
    head_stats: dict,
    patterns: dict,
    mixing_ratios: dict | None = None,
    dependency_heads: dict | None = None,
    dependency_heads_norm: dict | None = None,
    head_distance: dict | None = None,
    rollout: dict | None = None,
    flow: dict | None = None,
    meta: dict | None = None,
) -> dict:
    """Assemble report.json from the accumulators' results (see the module docstring).

    Args:
      layers, heads: the captured layer and head numbers the [L][H] axes follow.
      head_stats: `HeadStats.result()`; patterns: `PatternCounts.result()`.
      mixing_ratios: {measure: [L]} from item 5 (Kobayashi et al. 2021) when
        computed elsewhere; None leaves ``mixing_ratios`` empty.
      dependency_heads, dependency_heads_norm: `DependencyHeads.result()`.
      head_distance: `HeadDistance.result()`; rollout: `RolloutStats.result()`;
      flow: `FlowStats.result()`.
      meta: extra metadata (model, input, timings, ...).

    Returns:
      A dict of JSON-ready values.
    """
    info = {
        "layers": list(layers),
        "heads": list(heads),
        "thresholds": thresholds(),
    }
    info.update(meta or {})
    report = {
        "meta": info,
        "head_stats": head_stats,
        "patterns": patterns,
        "mixing_ratios": mixing_ratios or {},
    }
    if dependency_heads is not None:
        report["dependency_heads"] = dependency_heads
    if dependency_heads_norm is not None:
        report["dependency_heads_norm"] = dependency_heads_norm
    if head_distance is not None:
        report["head_distance"] = {
            "js_divergence": head_distance["divergence"],
            "mds": head_distance["mds"],
        }
    if rollout is not None:
        report["rollout"] = rollout
    if flow is not None:
        report["flow"] = flow
    return _plain(report)


def markdown_path(path: str | Path, flag: str = "the report's path") -> Path:
    """Where `write_report(report, path)` writes the Markdown summary: beside it, .md.

    Raises:
      UsageError: `path` is itself .md (the summary would replace the JSON report).
    """
    path = Path(path)
    if path.suffix.lower() == ".md":
        raise UsageError(
            f"{flag} {path} is a .md name, which the report's Markdown summary takes "
            f"beside it: give the JSON report a .json name ({path.with_suffix('.json')})"
        )
    return path.with_suffix(".md")


def write_report(report: dict, path: str | Path) -> tuple[Path, Path]:
    """Write report.json at `path` and its Markdown summary beside it (same stem, .md).

    Returns:
      (json path, markdown path).

    Raises:
      UsageError: `path` is a .md name (`markdown_path`).
    """
    md = markdown_path(path)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = render_markdown(report)  # before either file changes: a failure leaves both
    outfile.write_text(path, json.dumps(report, indent=1) + "\n")
    outfile.write_text(md, text)
    return path, md
