"""`jaxattn view INPUT... --out FILE`: attention views as one HTML file, an SVG or a PNG.

INPUT is any mix of:
- a text (``"I went to the store."``), or a pair written ``"A ||| B"``;
- an input file in any format `jaxattn.inputs` reads (text lines with
  ``A ||| B`` or ``A<TAB>B`` pairs, JSONL, CoNLL-U);
- a capture file written by ``Capture.save`` / ``jaxattn capture --out`` (shown
  as saved: views that need quantities it lacks say so).

Texts are captured with the local engine (--model, default the embedded
MiniLM) or through a server (--server). HTML holds every example with a
selector and the chosen views; SVG and PNG (for papers) draw one view of one
example (--example, --layer, --heads, --head, --token, --kind).
"""

from __future__ import annotations

from pathlib import Path

from jaxattn.cli.args import add_codec_argument, add_source_arguments, add_truncate_argument, ints
from jaxattn.cli.source import open_source
from jaxattn.inputs import read_records, split_pair

FORMATS = ("html", "svg", "png")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "view",
        help="head/model/neuron/stats views as self-contained HTML, SVG or PNG",
        description="Write attention views of INPUT (texts, 'A ||| B' pairs, input files: text "
        "lines, JSONL or CoNLL-U, or saved capture files) to one self-contained HTML file "
        "(no network), or one view as SVG/PNG.",
    )
    p.add_argument("inputs", metavar="INPUT", nargs="+")
    p.add_argument("--out", metavar="FILE", required=True, help="file to write")
    p.add_argument("--format", choices=FORMATS, help="default: from --out's suffix, else html")
    p.add_argument(
        "--views",
        default=None,
        help="comma-separated: head,model,neuron,stats (default all; svg/png: head)",
    )
    add_source_arguments(p)
    add_codec_argument(p)
    p.add_argument(
        "--precision",
        default="auto",
        choices=("auto", "float32", "uint8"),
        help="weights in the HTML: exact float32, uint8 (4x smaller) or auto",
    )
    p.add_argument("--title", default="jaxattn views", help="HTML page title")
    add_truncate_argument(p)
    g = p.add_argument_group("svg/png: what to draw")
    g.add_argument("--example", type=int, default=0, help="example index (default 0)")
    g.add_argument("--layer", type=int, help="layer number (head/neuron; default the first)")
    g.add_argument("--heads", type=ints, help="head numbers for the head view (default all)")
    g.add_argument("--head", type=int, help="head number for the neuron view (default first)")
    g.add_argument("--token", type=int, default=0, help="query position for the neuron view")
    g.add_argument(
        "--kind",
        default="attention",
        choices=("attention", "norm"),
        help="attention weights or norm-based ||alpha f(x)|| (rows normalised)",
    )
    g.add_argument("--scale", type=float, default=2.0, help="PNG pixels per SVG pixel (2)")
    p.set_defaults(func=_run)


def read_inputs(inputs: list[str]) -> list:
    """Each INPUT -> a Capture (a capture file), the texts of an input file, or the text itself."""
    items: list = []
    for arg in inputs:
        path = Path(arg)
        if path.is_file():
            with open(path, "rb") as f:
                is_zip = f.read(2) == b"PK"
            if is_zip:
                from jaxattn.capture import Capture

                items.append(Capture.load(path))
            else:
                items += [r.text for r in read_records(path)]
        else:
            items.append(split_pair(arg))
    if not items:
        raise ValueError("no example to view")
    return items


def capture_texts(args, texts: list, what: tuple[str, ...]) -> list:
    """Captures of `texts` (strings or pairs) from --server or the local engine."""
    if not texts:
        return []
    with open_source(args) as source:
        return source.capture(texts, what, dtype="float32", truncate=args.truncate)


def _index(values, value, what: str) -> int:
    if value is None:
        return 0
    if value not in values:
        raise ValueError(f"{what} {value} was not captured (have {list(values)})")
    return list(values).index(value)


def _run(args) -> int:
    from jaxattn.views import payload as pl  # the module

    fmt = args.format or {".svg": "svg", ".png": "png"}.get(Path(args.out).suffix.lower(), "html")
    default = "head" if fmt != "html" else ",".join(pl.VIEWS)
    views = pl.check_views([v.strip() for v in (args.views or default).split(",") if v.strip()])
    if fmt != "html" and len(views) != 1:
        raise ValueError(f"--format {fmt} draws one view; got --views {','.join(views)}")
    items = read_inputs(args.inputs)
    texts = [x for x in items if isinstance(x, str | tuple)]
    captured = iter(capture_texts(args, texts, pl.needs(views)))
    caps = [next(captured) if isinstance(x, str | tuple) else x for x in items]
    if fmt == "html":
        from jaxattn.views import write_html

        write_html(args.out, caps, views=views, precision=args.precision, title=args.title)
    else:
        from jaxattn.views import to_svg, write_png

        if not 0 <= args.example < len(caps):
            raise ValueError(f"--example {args.example}: there are {len(caps)} examples")
        cap = caps[args.example]
        layer = _index(cap.layers, args.layer, "layer")
        opts = dict(kind=args.kind)
        if views[0] == "head":
            heads = [_index(cap.heads, h, "head") for h in args.heads] if args.heads else None
            opts.update(layer=layer, heads=heads)
        elif views[0] == "neuron":
            if not 0 <= args.token < cap.length:
                raise ValueError(f"--token {args.token}: the example has {cap.length} tokens")
            opts = dict(layer=layer, head=_index(cap.heads, args.head, "head"), token=args.token)
        svg = to_svg(cap, views[0], **opts)
        if fmt == "svg":
            Path(args.out).write_text(svg, encoding="utf-8")
        else:
            write_png(args.out, svg, scale=args.scale)
    print(f"wrote {args.out} ({fmt}: {', '.join(views)}; {len(caps)} example(s))")
    return 0
