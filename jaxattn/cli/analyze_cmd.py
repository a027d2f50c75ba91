"""`jaxattn analyze INPUT --out report.json`: the attention-paper analyses over a corpus.

INPUT is any input file (`jaxattn.inputs`): text lines (pairs as ``A ||| B`` or
``A<TAB>B``), JSONL, or CoNLL-U (each sentence captured as its words joined by
single spaces, so its pieces align to the words; its parses give the
dependency-head table). Captures come from a local engine, or from a server
with --server, in chunks, and stream through `jaxattn.analysis.CorpusAnalysis`:
memory stays bounded whatever the corpus size.
"""

from __future__ import annotations

import platform
import time
from pathlib import Path

from jaxattn import cpus
from jaxattn.cli.analysis_flags import (
    add_dependency_arguments,
    add_flow_arguments,
    corpus_analysis,
)
from jaxattn.cli.analyze_saved import analyse_saved, no_parse
from jaxattn.cli.args import (
    add_codec_argument,
    add_dtype_argument,
    add_limit_argument,
    add_overwrite_argument,
    add_precision_argument,
    add_source_arguments,
    add_too_long_argument,
    check_output,
    non_negative,
    positive,
)
from jaxattn.cli.corpus import records, shown
from jaxattn.cli.corpus import report as report_counts
from jaxattn.cli.saved import open_saved
from jaxattn.cli.source import describe, open_source
from jaxattn.engine.ablation import MODES as ABLATION_MODES
from jaxattn.errors import InputError, TooLongError, UsageError
from jaxattn.inputs import read_records
from jaxattn.progress import Progress


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "analyze",
        help="head statistics, patterns, dependency heads and rollout over a corpus "
        "(a decoder: sinks, induction, copying heads)",
        description="Analyse the attention of every example of INPUT (Clark et al. 2019, "
        "Kovaleva et al. 2019, Vig 2019, Abnar & Zuidema 2020; on a decoder, GPT-2 or "
        "Llama-style: attention sinks with and without BOS, previous-token, duplicate-token "
        "and induction heads, OV copying scores, and with --ablate the causal LM loss, in "
        "place of the encoder-only statistics) and write report.json with a Markdown "
        "summary (report.md) beside it.",
    )
    p.add_argument(
        "input",
        metavar="INPUT",
        help="input file: text (one example per line; pairs 'A ||| B' or A<TAB>B), JSONL "
        "or CoNLL-U; - for standard input; or a store of jaxattn dump (a directory or a "
        "TensorStore URL) or a capture file (.npz), analysed as stored without a model",
    )
    p.add_argument(
        "--out",
        metavar="FILE",
        required=True,
        help="report.json to write (report.md goes beside it)",
    )
    add_overwrite_argument(p)
    p.add_argument(
        "--conllu",
        metavar="FILE",
        help="parsed corpus for the dependency heads (default: INPUT if CoNLL-U)",
    )
    add_source_arguments(p, timeout=600.0)
    p.add_argument(
        "--chunk",
        type=positive,
        default=256,
        metavar="N",
        help="examples captured per call (bounds memory; default 256)",
    )
    add_limit_argument(p)
    add_too_long_argument(p)
    add_dtype_argument(p)
    add_codec_argument(p)
    add_precision_argument(p)
    p.add_argument(
        "--stats-only",
        action="store_true",
        help="only Clark et al.'s per-head statistics (a decoder's: the first-token, "
        "previous-token, self, punctuation and entropy statistics, not induction), computed "
        "on the device: no attention map is copied to the host (for corpora of millions of "
        "sentences on a GPU/TPU)",
    )
    p.add_argument(
        "--no-norm",
        action="store_true",
        help="attention weights only (skip alpha_fx_norm, the norm-based weights)",
    )
    p.add_argument(
        "--ablate",
        choices=ABLATION_MODES,
        help="also ablate each head alone (Kovaleva et al. 2019) and report the change of "
        "the final [CLS]/mean-pooled vectors and of the masked-LM loss (an encoder) or the "
        "causal LM loss (a decoder), where the checkpoint has that head (local engine only)",
    )
    p.add_argument(
        "--ablate-examples",
        type=positive,
        default=200,
        metavar="N",
        help="examples used by --ablate (each head reruns them; default 200)",
    )
    p.add_argument(
        "--sink-examples",
        type=non_negative,
        default=200,
        metavar="N",
        help="a decoder: capture N texts again with and without BOS for the attention-sink "
        "comparison (Xiao et al. 2023): the first N the study can use (2 tokens or more "
        "without BOS, within the model's limit with it); local engine only; 0: skip; "
        "default 200",
    )
    p.add_argument(
        "--no-head-distance",
        action="store_true",
        help="skip the Jensen-Shannon distances between heads (O(heads^2 T^2))",
    )
    add_flow_arguments(p)
    p.add_argument(
        "--coarse-relations",
        action="store_true",
        help="group dependency relations by universal label (nmod:poss -> nmod)",
    )
    add_dependency_arguments(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_run)


def captures(source, texts: list, what: tuple[str, ...], args, bar: Progress):
    """A `jaxattn.CaptureStream` of `texts`, `--chunk` texts per call (bounded memory),
    under --too-long, counting into `bar`."""
    return source.capture_iter(
        texts,
        what=what,
        dtype=args.dtype,
        too_long=args.too_long,
        precision=args.precision,
        progress=bar,
        window=args.chunk,
    )


def _run(args) -> int:
    from jaxattn.analysis import MIXING_NEEDS

    t0 = time.monotonic()
    if args.ablate and args.server:
        raise UsageError(
            "--ablate runs the model with heads disabled: use a local engine, not --server"
        )
    if args.stats_only and args.conllu:
        raise UsageError(
            "--stats-only leaves the maps on the device; the dependency table "
            "of --conllu needs them: drop one of the two"
        )
    if args.stats_only and args.flow:
        raise UsageError(
            "--stats-only leaves the maps on the device; --flow needs them: drop one of the two"
        )
    from jaxattn.analysis.report import markdown_path

    check_output(args.out, args.overwrite)
    check_output(markdown_path(args.out, "--out"), args.overwrite, "--out's report.md")
    saved = open_saved(args.input)
    if saved is not None:
        corpus, meta = analyse_saved(args, saved)
        if corpus.decoder is not None:  # say why OV copying and BOS sinks are missing
            from jaxattn.cli.decoder_analyses import stored_extras

            return _write(args, corpus, meta, t0, decoder=stored_extras())
        return _write(args, corpus, meta, t0)
    path = Path(args.input)
    read = list(records(args.input, limit=args.limit))
    sentences = [r.sentence for r in read]
    parsed_input = any(s is not None for s in sentences)
    texts: list = [r.text for r in read]
    extra = []
    if args.conllu and not (parsed_input and Path(args.conllu).resolve() == path.resolve()):
        conllu = read_records(args.conllu, "conllu", limit=args.limit)
        extra = [r.sentence for r in conllu]
    if not texts:
        raise InputError(None, f"{shown(args.input)} has no examples", None)
    if args.stats_only:
        what = ("head_stats",) if args.no_norm else ("head_stats", "norm_head_stats")
        sentences = [None] * len(texts)  # no dependency table without maps
        parsed_input = False
    elif args.no_norm:
        what = ("attention",)
    else:
        what = tuple(dict.fromkeys(("attention", "alpha_fx_norm", *MIXING_NEEDS)))
    where = "standard input" if args.input == "-" else f"INPUT {args.input}"
    source = open_source(args)
    try:
        info = source.model_info()
        if info.causal:  # a decoder: its own analyses, no parses (no [CLS]/[SEP], no future)
            if args.stats_only:
                what = ("decoder_head_stats",) + (
                    () if args.no_norm else ("decoder_norm_head_stats",)
                )
            extra, sentences = [], [None] * len(texts)
        # What the model refuses (a parallel residual's mixing_ratio) is left out: the
        # mixing section then has the measures the captures allow (MixingRatios.update).
        computed = info.quantities or what  # an older server's ModelInfo may list none
        refused = [q for q in what if q not in computed]
        what = tuple(q for q in what if q in computed)
        corpus = corpus_analysis(args, decoder=info.causal, family=info.family)
        no_table = not (parsed_input or extra or args.stats_only or info.causal)
        skipped = no_parse(where) if no_table else {}
        quiet = args.quiet or len(texts) + len(extra) < 50
        model, source_precision = info.name, info.precision
        bar = Progress(len(texts), "analyze", enabled=not quiet)
        stream = captures(source, texts, what, args, bar)
        try:
            for cap in stream:
                corpus.update(cap, sentences[stream.index])
        except TooLongError as e:  # name the input's file and line
            where = "standard input" if args.input == "-" else args.input
            reason = (
                f"{e.length} tokens, over the model's limit of {e.limit}: use --too-long "
                "truncate or skip"
            )
            raise InputError(read[e.index].line, reason, where) from None
        bar.close()
        report_counts(stream, "jaxattn analyze")
        if texts and len(stream.skipped) == len(texts):
            raise InputError(None, "every text was skipped (--too-long skip): nothing to analyse")
        counts = {"truncated": len(stream.truncated), "skipped": len(stream.skipped)}
        if extra:
            bar = Progress(len(extra), "parses", enabled=not quiet)
            extra_texts = [" ".join(s.words) for s in extra]
            stream = captures(source, extra_texts, what, args, bar)
            for cap in stream:
                corpus.add_parse(cap, extra[stream.index])
            bar.close()
            report_counts(stream, "jaxattn analyze (--conllu)")
        decoder = None
        if info.causal:
            from jaxattn.cli.decoder_analyses import decoder_extras

            decoder = decoder_extras(source, texts, args)
        ablation = None
        if args.ablate:
            from jaxattn.engine import head_ablation_study

            ablated = texts[: args.ablate_examples]
            # one tick per head, each rerunning the ablated examples: ex/s counts the reruns
            bar = Progress(info.layers * info.heads, "ablate (heads)", enabled=not quiet)
            ablation = head_ablation_study(
                source,
                ablated,
                mode=args.ablate,
                too_long=args.too_long,
                progress=lambda: bar.update(1, examples=len(ablated)),
            )
            bar.close()
    finally:
        source.close()
    meta = {
        "model": model,
        "input": str(path),
        "conllu": args.conllu or (str(path) if parsed_input else None),
        "captured_by": describe(args),
        "what": list(what),
        **({"refused_by_the_model": refused} if refused else {}),
        "too_long": args.too_long,
        **counts,
        "dtype": args.dtype,
        "precision": args.precision or source_precision,
        **skipped,
    }
    return _write(args, corpus, meta, t0, ablation, decoder)


def _write(args, corpus, meta: dict, t0: float, ablation=None, decoder=None) -> int:
    from jaxattn.analysis import write_report
    from jaxattn.analysis.report import json_ready

    seconds = time.monotonic() - t0
    meta = {
        **meta,
        "seconds": round(seconds, 1),
        "machine": f"{platform.machine()}, {cpus.usable()} CPUs, {platform.system()}",
    }
    report = corpus.report(meta=meta)
    if ablation is not None:
        report["head_ablation"] = json_ready(ablation)
    if decoder is not None:
        sections, not_run = decoder
        report.update(json_ready(sections))
        report["meta"]["not_run"].update(not_run)
    json_path, md_path = write_report(report, args.out)
    print(f"analysed {corpus.examples} examples in {seconds:.1f}s: wrote {json_path} and {md_path}")
    return 0
