"""`jaxattn capture TEXT [TEXT_B]`: capture one example, locally or from a server."""

from __future__ import annotations

from jaxattn.cli.args import (
    add_codec_argument,
    add_precision_argument,
    add_source_arguments,
    add_spec_arguments,
    add_truncate_argument,
)
from jaxattn.cli.source import open_source
from jaxattn.inputs import split_pair


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "capture",
        help="capture one sentence or sentence pair",
        description="Capture attention quantities of TEXT (or the pair TEXT, TEXT_B) with a "
        "local engine, or from a running server with --server; print a summary and "
        "optionally save the capture (load it with jaxattn.Capture.load).",
    )
    p.add_argument("text", metavar="TEXT", help="a sentence, or a pair as 'A ||| B'")
    p.add_argument("text_b", metavar="TEXT_B", nargs="?", help="sentence B of a pair")
    add_source_arguments(p)
    add_spec_arguments(p)
    add_codec_argument(p)
    add_precision_argument(p)
    add_truncate_argument(p)
    p.add_argument("--out", metavar="FILE", help="save the capture to FILE (.npz)")
    p.set_defaults(func=_run)


def _run(args) -> int:
    # 'A ||| B' is a pair, as in every input (`jaxattn.inputs.split_pair`).
    text = split_pair(args.text) if args.text_b is None else (args.text, args.text_b)
    with open_source(args) as source:
        cap = source.capture([text], args.what, args.layers, args.heads, args.dtype,
                             truncate=args.truncate, precision=args.precision)[0]  # fmt: skip
    print(" ".join(cap.tokens))
    if cap.sentence_b_start is not None:
        print(f"sentence B starts at token {cap.sentence_b_start}")
    print(f"layers {list(cap.layers)}  heads {list(cap.heads)}  dtype {cap.dtype}  "
          f"precision {cap.precision}")  # fmt: skip
    for name, array in cap.tensors.items():
        print(f"  {name:18s} {list(array.shape)} {array.dtype} ({array.nbytes} bytes)")
    if args.out:
        cap.save(args.out)
        print(f"saved to {args.out}")
    return 0
