"""`jaxattn view INPUT... --out FILE`: attention views as one HTML file, an SVG or a PNG.

INPUT is any mix of (`jaxattn.inputs.is_file_argument` decides, never by guessing):
- a text (``"I went to the store."``), or a pair written ``"A ||| B"``;
- an input file in any format `jaxattn.inputs` reads (text lines with
  ``A ||| B`` or ``A<TAB>B`` pairs, JSONL, CoNLL-U), or ``-`` for standard input;
- a capture file written by ``Capture.save`` / ``jaxattn capture --out`` (shown
  as saved: views that need quantities it lacks say so).

Texts are captured with the local engine (--model, default the embedded
MiniLM) or through a server (--server), with --layers/--heads. HTML holds
every example with a selector and the chosen views; SVG and PNG (for papers)
draw one view of one example (--example). --layers/--heads choose the layers
and heads shown, of texts and saved captures alike (the head view of a static
export draws one layer, the neuron view one layer and one head). Modes:
--compare (`view_compare`), --global (`view_global`) and --stats-first
(`view_segments`: statistics along the text of long documents).
"""

from __future__ import annotations

from pathlib import Path

from jaxattn import outfile
from jaxattn.analysis.weights import WEIGHT_KINDS
from jaxattn.cli import view_compare, view_global, view_segments
from jaxattn.cli.args import (
    add_codec_argument,
    add_generate_arguments,
    add_limit_argument,
    add_overwrite_argument,
    add_precision_argument,
    add_selection_arguments,
    add_source_arguments,
    add_too_long_argument,
    check_output,
    engine_flags,
    ensure_parent,
    positive,
)
from jaxattn.cli.corpus import capture_counted, read_inputs
from jaxattn.cli.corpus import shown as shown_input
from jaxattn.cli.generated import check_generate
from jaxattn.cli.saved import require
from jaxattn.errors import InputError, UsageError
from jaxattn.selection import resolve_indices

FORMATS = ("html", "svg", "png")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "view",
        help="head/model/neuron/stats views as self-contained HTML, SVG or PNG",
        description="Write attention views of INPUT (texts, 'A ||| B' pairs, input files: text "
        "lines, JSONL or CoNLL-U, '-' for stdin, or saved capture files) to one "
        "self-contained HTML file (no network), or one view as SVG/PNG.",
    )
    p.add_argument(
        "inputs",
        metavar="INPUT",
        nargs="*",
        help="texts, input files, capture files (.npz) or stores of jaxattn dump "
        "(a directory or a TensorStore URL, read lazily)",
    )
    modes = p.add_mutually_exclusive_group()
    modes.add_argument(
        "--compare",
        nargs=2,
        metavar=("A", "B"),
        help="side by side: A and B (models, capture files or stores; see "
        "docs/compare.md) with a difference map",
    )
    modes.add_argument(
        "--global",
        dest="global_map",
        action="store_true",
        help="the joint query-key map of every head over the corpus INPUT (docs/global-view.md)",
    )
    p.add_argument("--out", metavar="FILE", required=True, help="file to write")
    add_overwrite_argument(p)
    p.add_argument(
        "--format",
        choices=FORMATS,
        help="default: from --out's suffix (.html, .htm, .svg, .png; none: html; another "
        "is refused unless --format names what to write)",
    )
    p.add_argument(
        "--views",
        default=None,
        help="comma-separated: head,model,neuron,stats (default all; svg/png: head)",
    )
    add_source_arguments(p)
    add_codec_argument(p)
    add_precision_argument(p)
    add_selection_arguments(p, used=" to capture and show")
    add_too_long_argument(p)
    add_generate_arguments(p)
    add_limit_argument(p)
    p.add_argument(
        "--embed-dtype",
        default="auto",
        choices=("auto", "float32", "uint8"),
        help="how the HTML embeds the data: exact float32; uint8 (weights in 1/255 "
        "steps, queries and keys in 63 steps per head); auto: float32 while the "
        "page's data is at most 1 MiB (default auto)",
    )
    p.add_argument(
        "--max-examples",
        type=positive,
        default=200,
        help="most examples one HTML page holds (default 200)",
    )
    p.add_argument("--title", default="jaxattn views", help="HTML page title")
    g = p.add_argument_group("what to draw (svg/png), where the page opens (html)")
    g.add_argument(
        "--example",
        type=int,
        default=None,  # None: 0, told apart from a given 0 (`_refused`)
        help="example index, negative from the end: the one drawn (svg/png) or shown "
        "first (html, --compare and --stats-first pages too) (default 0)",
    )
    g.add_argument(
        "--token",
        type=int,
        default=None,
        help="query position for the neuron view (html: the one it opens at), negative "
        "from the end (-1: the last token, a decoder's last generated one) (default: a "
        "decoder's last token, its first sees only itself; an encoder's first)",
    )
    g.add_argument(
        "--kind",
        default="attention",
        choices=tuple(WEIGHT_KINDS),
        help="attention weights or norm-based ||alpha f(x)|| (rows normalised) (default attention)",
    )
    g.add_argument("--scale", type=float, default=2.0, help="PNG pixels per SVG pixel")
    view_compare.add_arguments(p)
    view_global.add_arguments(p)
    view_segments.add_arguments(p, modes)
    p.set_defaults(func=_run)


def _selected(cap, args):
    """`cap` restricted to --layers/--heads (layer/head numbers of the model): a
    text's capture already is; a saved capture is cut to them here."""
    sel = {}
    for key, arg in (("layers", args.layers), ("heads", args.heads)):
        if arg is not None:
            have = getattr(cap, key)
            sel[key] = resolve_indices(arg, _count(cap, f"num_{key}", have), key)
    try:
        return cap.select(**sel)
    except ValueError as e:
        raise UsageError(f"--{e}") from None


# --out's suffix -> the format it implies (no suffix: html; another: --format names it).
OUT_SUFFIXES = {".svg": "svg", ".png": "png", ".html": "html", ".htm": "html"}


def _check_suffix(args) -> None:
    """A UsageError for an --out whose suffix names a format view does not write
    (x.pdf, x.jpg, x.npz), unless --format says what to write under it."""
    suffix = Path(args.out).suffix.lower()
    if suffix and suffix not in OUT_SUFFIXES and args.format is None:
        raise UsageError(
            f"--out {args.out}: view writes HTML (.html, .htm), SVG (.svg) or PNG (.png), "
            f"not {suffix}: give --out one of those names, or --format html to write "
            "HTML under this one"
        )


def _one(values, selected, flag: str, view: str) -> None:
    """A view that draws one layer/head: the selection must name one (none: the first)."""
    if selected is not None and len(values) != 1:
        raise UsageError(f"{flag}: the {view} view draws one; give one index")


def _count(cap, key: str, values) -> int:
    """The model's layer or head count: from the capture's provenance, else what it holds."""
    config = cap.provenance.get("config") or {}
    return int(config.get(key) or max(values) + 1)


def _run(args) -> int:
    from jaxattn.views import payload as pl  # the module

    modes = {"--compare": args.compare, "--global": args.global_map}
    mode = next((flag for flag, on in modes.items() if on), None)
    mode = mode or ("--stats-first" if args.stats_first else None)
    if args.generate is not None and mode:
        raise UsageError(f"--generate continues texts for the views of INPUT, not {mode}")
    check_generate(args)
    _refused(args, mode)
    check_output(args.out, args.overwrite)
    _check_suffix(args)
    args.example = 0 if args.example is None else args.example
    if args.compare:
        return view_compare.run(args)
    if args.global_map:
        return view_global.run(args)
    if args.stats_first:
        return view_segments.run(args)
    if not args.inputs:
        raise UsageError(
            "give at least one INPUT (a text, an input file, a capture file or "
            "a store), or --compare A B"
        )
    suffix = Path(args.out).suffix.lower()
    if args.format and OUT_SUFFIXES.get(suffix, args.format) != args.format:
        raise UsageError(
            f"--format {args.format} and --out {args.out} disagree: the file would "
            f"hold {args.format} under a {suffix} name"
        )
    fmt = args.format or OUT_SUFFIXES.get(suffix, "html")
    default = "head" if fmt != "html" else ",".join(pl.VIEWS)
    views = pl.check_views([v.strip() for v in (args.views or default).split(",") if v.strip()])
    if fmt != "html" and len(views) != 1:
        raise UsageError(f"--format {fmt} draws one view; got --views {','.join(views)}")
    limit, cap = args.limit, args.max_examples
    if fmt != "html":  # one example drawn: no page to cap; read no example past it
        cap = None
        if args.example >= 0 and args.too_long != "skip":  # (a skipped text shifts them)
            limit = min(limit or args.example + 1, args.example + 1)
    items = read_inputs(args.inputs, limit, cap)
    if not items:
        raise InputError(None, f"no example to view in {' '.join(map(shown_input, args.inputs))}")
    texts = [x for x in items if isinstance(x, str | tuple)]
    saved = len(texts) < len(items)
    if not texts:  # saved captures only: nothing for a model to capture or continue
        for flag, given in (
            ("--generate", args.generate is not None),
            ("--model", args.model),
            ("--server", args.server),
            ("--precision", args.precision),
            *((flag, True) for flag in engine_flags(args)),
        ):
            if given:
                kept = (
                    " (a store of dump --generate keeps its continuations)"
                    if flag == "--generate"
                    else ""
                )
                raise UsageError(
                    f"{flag} applies to texts to capture, and INPUT holds saved captures "
                    f"only, drawn as saved{kept}: drop {flag}"
                )
    caps = capture_counted(args, texts, pl.needs(views), items, args.generate is not None)
    if not caps:
        raise InputError(None, "every text was skipped (--too-long skip): nothing to view")
    if saved:  # texts were captured with the selection; saved captures are cut to it
        caps = [_selected(cap, args) for cap in caps]
    if fmt == "html":
        from jaxattn.views import write_html

        if saved:  # every view draws attention: name what to capture, as a static one does
            require(caps, ("attention",), "INPUT", "jaxattn view")
        drawn = f"the page (--views {','.join(views)})"
        example, token = _opening(args, caps, "neuron" in views, drawn)
        write_html(
            ensure_parent(args.out),
            caps,
            views=views,
            embed=args.embed_dtype,
            title=args.title,
            max_examples=args.max_examples,
            example=example,
            token=token,
        )
    else:
        _write_static(args, fmt, views[0], caps)
    # a static export draws one example: say which, not that it holds them all
    shown = f"{len(caps)} example(s)" if fmt == "html" else f"example {args.example}"
    print(f"wrote {args.out} ({fmt}: {', '.join(views)}; {shown})")
    return 0


# What each mode's page has no place to open at: --example, --token, and why not.
_NO_OPENING = {
    "--global": (
        "the joint query-key map is of the whole corpus, with no one example to open at",
        "the joint query-key map has no query token to open at",
    ),
    "--compare": (None, "the compare page has no query token to open at"),
    "--stats-first": (None, "the stats-first page draws statistics per segment, no query token"),
}


def _refused(args, mode: str | None) -> None:
    """--example or --token given to a mode whose page cannot open there: a UsageError
    naming the flag and why (`_NO_OPENING`), not ignored."""
    why = _NO_OPENING.get(mode, (None, None))
    for flag, value, reason in zip(
        ("--example", "--token"), (args.example, args.token), why, strict=True
    ):
        if value is not None and reason:
            raise UsageError(f"{flag} {value}: {reason} ({mode}): drop {flag}")


def _opening(args, caps: list, neuron: bool, drawn: str) -> tuple[int, int]:
    """(example index, query token) of --example and --token (the token checked where
    the neuron view is drawn): an HTML page opens there, a static export draws them.
    --token where no neuron view is drawn (`drawn`: what is) is a UsageError, as the
    modes with nothing to open at refuse it (`_refused`), not ignored."""
    from jaxattn.views.page import opening

    if args.token is not None and not neuron:
        raise UsageError(
            f"--token {args.token}: only the neuron view opens at a query token, and "
            f"{drawn} has none: drop --token, or draw the neuron view"
        )
    try:
        return opening(caps, args.example, args.token if neuron else None, "INPUT")
    except UsageError as e:  # "example 7: ..." of the flag
        raise UsageError(f"--{e}") from None


def _write_static(args, fmt: str, view: str, caps: list) -> None:
    from jaxattn.views import to_svg, write_png

    index, token = _opening(args, caps, view == "neuron", f"the {view} view")
    cap = caps[index]
    if view == "neuron":
        needed = ("queries", "keys")
    else:
        needed = (WEIGHT_KINDS[args.kind],)
    require([cap], needed, f"example {args.example}", f"the {view} view (--kind {args.kind})")
    # `cap` holds the selected layers and heads (`_selected`, or captured so). The
    # model and stats views draw them all; the head view its first layer (the one
    # named) with every head; the neuron view its first layer and head.
    opts: dict = dict(kind=args.kind)
    if view in ("head", "neuron"):
        _one(cap.layers, args.layers, "--layers", view)
    if view == "neuron":
        _one(cap.heads, args.heads, "--heads", view)
        opts = dict(token=token)
    svg = to_svg(cap, view, **opts)
    ensure_parent(args.out)
    if fmt == "svg":
        outfile.write_text(args.out, svg)
    else:
        write_png(args.out, svg, scale=args.scale)
