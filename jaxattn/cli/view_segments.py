"""`jaxattn view INPUT --stats-first --out FILE`: per-head statistics along the text.

The stats-first page (`jaxattn.views.segments_page`, docs/views.md): for each
layer and head the sink, previous-token and local shares and the entropy per
segment of the text, for long documents. Texts are captured twice: the per-row
statistics of every layer and head (``decoder_row_head_stats``, whose entropy is an
encoder's too: [L, H, T, P] numbers, no map; blockwise on a long text), from which
every head's sink, previous-token and entropy segments come, and, with
``--stats-first maps`` (the default), the attention maps of the --layers/--heads
selection, which add their local share; ``--stats-first
statistics`` captures no map (no local share). Saved capture files are used as
they are: consecutive files of the same text are one example.
"""

from __future__ import annotations

import argparse

from jaxattn.cli.args import check_output, ensure_parent, opened_example, positive
from jaxattn.cli.corpus import read_inputs, shown
from jaxattn.cli.parser import did_you_mean, nearest
from jaxattn.errors import InputError, UsageError

FROM = ("maps", "statistics")


class _StatsFirst(argparse.Action):
    """--stats-first [maps|statistics]. Any other word after it is an INPUT, as written
    (``view --stats-first ewt.zarr``: argparse would take it for the option's value), kept
    in ``args.stats_first_input`` with the INPUTs read before it (`inputs`); a word
    close to maps or statistics, and no file, is a misspelling, refused with the nearest."""

    def __call__(self, parser, namespace, value, option_string=None):
        if value not in FROM:
            close = [] if _a_file(value) else nearest(value, FROM)
            if close:
                hint = did_you_mean(close, quote=True)
                parser.error(f"argument --stats-first: invalid choice: {value!r}: {hint}")
            namespace.stats_first_input = (value, list(namespace.inputs or ()))
            value = self.const
        setattr(namespace, self.dest, value)


def _a_file(word: str) -> bool:
    """Whether `word` names a file or store (or is shaped like a path): an INPUT."""
    from pathlib import Path

    from jaxattn.inputs import looks_like_path

    return looks_like_path(word) or Path(word).exists()


def inputs(args) -> list[str]:
    """INPUT, with a word that followed --stats-first in its place (`_StatsFirst`)."""
    word, before = args.stats_first_input or (None, None)
    if word is None:
        return args.inputs
    if before:  # INPUT came before --stats-first, and no INPUT after it
        return [*before, word]
    return [word, *args.inputs]


def add_arguments(parser, modes) -> None:
    """Add this mode's options: --stats-first in the view modes' group, its settings."""
    from jaxattn.views.segments import LOCAL, SEGMENT

    modes.add_argument(
        "--stats-first",
        nargs="?",
        const="maps",
        action=_StatsFirst,
        metavar="{maps,statistics}",
        help="per-head sink/previous/local shares and entropy along the text, per "
        "--segment tokens, for long documents; every head's sink, previous and entropy "
        "from its per-row statistics; 'maps' (default): the local share of the "
        "--layers/--heads selection from its maps; 'statistics': no map captured, no "
        "local share; any other word after it is an INPUT (--stats-first ewt.zarr) "
        "(docs/views.md)",
    )
    parser.set_defaults(stats_first_input=None)  # (word, INPUT before it): `_StatsFirst`
    g = parser.add_argument_group("--stats-first: statistics along the text")
    g.add_argument(
        "--segment",
        type=positive,
        default=SEGMENT,
        metavar="TOKENS",
        help=f"tokens a segment (default {SEGMENT})",
    )
    g.add_argument(
        "--local-window",
        type=positive,
        default=LOCAL,
        metavar="TOKENS",
        help=f"the local share: weight on keys within this many tokens (default {LOCAL})",
    )


def _capture(args, texts: list) -> list[list]:
    """Per captured text, its captures: the statistics of every layer and head, then (with
    --stats-first maps) the attention maps of the --layers/--heads selection."""
    from jaxattn.cli.corpus import report
    from jaxattn.cli.source import open_source
    from jaxattn.views.segments_page import statistics_captures

    options = dict(dtype="float32", too_long=args.too_long, precision=args.precision)
    runs = []
    with open_source(args) as source:
        causal = bool(source.model_info().causal)
        for what in statistics_captures(causal):
            runs.append((what, None, None))
        if args.stats_first == "maps":
            runs.append((("attention",), args.layers, args.heads))
        per_run = []
        for what, layers, heads in runs:
            stream = source.capture_iter(texts, what=what, layers=layers, heads=heads, **options)
            per_run.append(list(stream))
        report(stream, "jaxattn view --stats-first")
    return [list(caps) for caps in zip(*per_run, strict=True)]


def run(args) -> int:
    """Write the stats-first page of `args.inputs` to `args.out` (HTML)."""
    from jaxattn.views.segments_page import group_by_text, write_segments_html

    args.inputs = inputs(args)
    if not args.inputs:
        raise UsageError("--stats-first: give at least one INPUT (a text, a file or a capture)")
    if args.format not in (None, "html") or not args.out.lower().endswith((".html", ".htm")):
        raise UsageError(f"--stats-first writes an HTML page: --out {args.out} is not .html")
    check_output(args.out, args.overwrite)
    items = read_inputs(args.inputs, args.limit, args.max_examples)
    if not items:
        raise InputError(None, f"no example to view in {' '.join(map(shown, args.inputs))}")
    texts = [x for x in items if isinstance(x, str | tuple)]
    caps = [x for x in items if not isinstance(x, str | tuple)]  # saved captures first
    caps += [c for group in (_capture(args, texts) if texts else []) for c in group]
    if not caps:
        raise InputError(None, "every text was skipped (--too-long skip): nothing to view")
    examples = len(group_by_text(caps))  # a text's captures (statistics, maps) are one
    example = opened_example(args.example, examples)
    try:
        write_segments_html(
            ensure_parent(args.out),
            caps,
            segment=args.segment,
            local=args.local_window,
            title=args.title,
            max_examples=args.max_examples,
            example=example,
        )
    except ValueError as e:
        raise UsageError(f"--stats-first: {e}") from None
    print(f"wrote {args.out} (statistics along the text; {examples} example(s))")
    return 0
