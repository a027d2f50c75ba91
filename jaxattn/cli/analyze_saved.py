"""`jaxattn analyze STORE`: saved captures (a store of `jaxattn dump`, a capture file)
analysed as stored, with no model and no capture (`jaxattn.cli.saved`).

Which quantities a run reads depends on its flags (`SAVED_RUNS`); saved captures
that lack them get the nearest flags they allow (`what_the_input_allows`).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from jaxattn.capture import Capture
from jaxattn.cli.analysis_flags import corpus_analysis
from jaxattn.cli.args import engine_flags
from jaxattn.cli.saved import require, saved_parses, stored_quantities
from jaxattn.config import refused_quantities
from jaxattn.errors import InputError, UsageError
from jaxattn.progress import Progress

# What each way of running analyze reads from saved captures: (its flags, in this order,
# the quantities).
SAVED_RUNS = (
    ((), ("attention", "alpha_fx_norm")),
    (("--no-norm",), ("attention",)),
    (("--stats-only",), ("head_stats", "norm_head_stats")),
    (("--stats-only", "--no-norm"), ("head_stats",)),
)


def no_parse(where: str, conllu_input: bool = True) -> dict:
    """report.json's meta.not_run for an input that carries no parse and no --conllu, said
    on stderr too, before the run: the dependency-head table is left out."""
    fix = "give --conllu FILE, a CoNLL-U parse of the same sentences" + (
        " (or a CoNLL-U INPUT)" if conllu_input else ""
    )
    reason = f"{where} carries no parse: {fix}"
    print(f"jaxattn analyze: no dependency-head table: {reason}", file=sys.stderr)
    return {"not_run": {"dependency_heads": reason}}


def is_decoder(cap: Capture) -> bool:
    """Whether a saved capture came from a decoder (causal) model: its provenance says so
    (a server's captures too), or, in older files, its provenance's config."""
    if "causal" in cap.provenance:
        return bool(cap.provenance["causal"])
    config = cap.provenance.get("config")
    return isinstance(config, Mapping) and bool(config.get("causal"))


def run_quantities(flags: tuple, decoder: bool) -> tuple[str, ...]:
    """The quantities a way of running (`SAVED_RUNS` flags) reads; a decoder's statistics
    on the device are its own (decoder_head_stats, decoder_norm_head_stats)."""
    what = dict(SAVED_RUNS)[flags]
    if decoder and "--stats-only" in flags:
        return tuple(f"decoder_{name}" for name in what)
    return what


def what_the_input_allows(stored, args, decoder: bool = False) -> str:
    """Advice for saved captures that lack what the flags given need: the nearest way of
    running that they do allow ("analyse with --no-norm", "drop --stats-only"), or ""."""
    given = {"--stats-only": args.stats_only, "--no-norm": args.no_norm}
    changes = []  # (add, drop) for each way of running that the stored quantities allow
    for flags, _ in SAVED_RUNS:
        if set(run_quantities(flags, decoder)) <= set(stored):
            add = [f for f in flags if not given[f]]
            changes.append((add, [f for f, on in given.items() if on and f not in flags]))
    if not changes:
        return ""
    add, drop = min(changes, key=lambda c: len(c[0]) + len(c[1]))  # the fewest changes
    steps = [f"{verb} {' '.join(fs)}" for verb, fs in (("add", add), ("drop", drop)) if fs]
    return " and ".join(steps)


def analyse_saved(args, caps) -> tuple:
    """(the `CorpusAnalysis`, the report's meta) of saved captures (a store, a capture
    file) analysed as stored: no model, no capture."""
    from jaxattn.analysis import MIXING_NEEDS

    where = f"INPUT {args.input}"
    for flag, given in (
        ("--model", args.model),
        ("--server", args.server),
        ("--ablate", args.ablate),
        ("--precision", args.precision),
        *((flag, True) for flag in engine_flags(args)),
    ):
        if given:
            raise UsageError(
                f"{where} holds captures, analysed as stored without running a model: drop {flag}"
            )
    if args.stats_only and args.conllu:
        raise UsageError(
            "--stats-only reads no maps; the dependency table of --conllu "
            "needs them: drop one of the two"
        )
    flags = tuple(
        f for f, on in (("--stats-only", args.stats_only), ("--no-norm", args.no_norm)) if on
    )
    decoder = bool(len(caps)) and is_decoder(caps[0])
    what = run_quantities(flags, decoder)
    # what the captured model refuses (a parallel residual's mixing_ratio) is not asked for
    config = (caps[0].provenance.get("config") or {}) if len(caps) else {}
    refused = refused_quantities(config)
    mixing = () if args.no_norm or args.stats_only else MIXING_NEEDS
    left_out = [q for q in mixing if q in refused]
    mixing = tuple(q for q in mixing if q not in refused)
    stored = stored_quantities(caps)
    try:
        require(
            caps,
            what,
            where,
            "jaxattn analyze" + (" --stats-only" if args.stats_only else ""),
            also=mixing,
        )
    except UsageError as e:
        instead = what_the_input_allows(stored, args, decoder)
        raise UsageError(f"{e} (or {instead})" if instead else str(e)) from None
    absent = [q for q in mixing if q not in stored]
    if absent:
        print(
            f"jaxattn analyze: {where} lacks {', '.join(absent)}: the mixing ratios that need "
            f"them are left out (report.json meta.not_in_input; capture with --what "
            f"{','.join(absent)} to have them)",
            file=sys.stderr,
        )
    caps = caps[: args.limit] if args.limit else caps
    parses = saved_parses(caps, args.conllu, args.input) if args.conllu else None
    no_table = not (parses or args.stats_only or decoder)
    skipped = no_parse(where, conllu_input=False) if no_table else {}
    family = caps[0].provenance.get("family") if len(caps) else None
    corpus = corpus_analysis(args, decoder=decoder, family=family)
    bar = Progress(len(caps), "analyze", enabled=not (args.quiet or len(caps) < 50))
    for i, cap in enumerate(caps):
        corpus.update(cap, parses[i] if parses else None)
        bar.update(1)
    bar.close()
    if not corpus.examples:
        raise InputError(None, f"{args.input} has no examples", None)
    first = caps[0]
    entries = getattr(caps, "entries", None)  # a store's manifest: no tensor is read
    truncated = sum(bool(c.truncated) for c in (caps if entries is None else entries))
    meta = {
        "model": first.provenance.get("model"),
        "input": args.input,
        "conllu": args.conllu,
        "captured_by": first.provenance.get("source") or f"capture file {args.input}",
        "what": list(stored),
        "truncated": truncated,
        "skipped": 0,
        "dtype": first.dtype,
        "precision": first.precision,
        "not_in_input": absent,
        **({"refused_by_the_model": left_out} if left_out else {}),
        **skipped,
    }
    return corpus, meta
