"""`jaxattn capture TEXT [TEXT_B]`: capture one example, locally or from a server."""

from __future__ import annotations

from jaxattn.cli.args import (
    add_codec_argument,
    add_generate_arguments,
    add_overwrite_argument,
    add_precision_argument,
    add_source_arguments,
    add_spec_arguments,
    add_too_long_argument,
    check_output,
    ensure_parent,
)
from jaxattn.cli.corpus import records
from jaxattn.cli.generated import capture_generated, check_generate, describe
from jaxattn.cli.source import open_source
from jaxattn.errors import InputError, UsageError
from jaxattn.inputs import STDIN, split_pair


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "capture",
        help="capture one sentence or sentence pair",
        description="Capture attention quantities of TEXT (or the pair TEXT, TEXT_B) with a "
        "local engine, or from a running server with --server; print a summary and "
        "optionally save the capture with its provenance (load it with "
        "jaxattn.Capture.load).",
    )
    p.add_argument(
        "text",
        metavar="TEXT",
        help="a sentence, or a pair as 'A ||| B'; '-' reads it from standard input (one "
        "example: a line, a JSONL record or a CoNLL-U sentence)",
    )
    p.add_argument("text_b", metavar="TEXT_B", nargs="?", help="sentence B of a pair")
    add_source_arguments(p)
    add_spec_arguments(p)
    add_codec_argument(p)
    add_precision_argument(p)
    add_too_long_argument(p)
    add_generate_arguments(p)
    p.add_argument("--out", metavar="FILE", help="save the capture to FILE (.npz)")
    add_overwrite_argument(p)
    p.set_defaults(func=_run)


def _stdin_text():
    """The one example on standard input (`-`), read as every input file is.

    Raises:
      InputError: it holds no example, or more than one.
    """
    got = [r.text for r in records(STDIN, limit=2)]
    if len(got) != 1:
        raise InputError(
            None,
            "standard input (TEXT -) holds "
            + ("no example" if not got else "more than one example")
            + ": capture takes one (view, analyze and dump read a corpus)",
        )
    return got[0]


def _run(args) -> int:
    # 'A ||| B' is a pair, as in every input (`jaxattn.inputs.split_pair`).
    text = _stdin_text() if args.text == STDIN else split_pair(args.text)
    if args.text_b is not None:
        if isinstance(text, tuple):
            raise UsageError("TEXT is already a pair ('A ||| B'): give TEXT_B or '|||', not both")
        text = (text, args.text_b)
    named = (
        [("TEXT", text)]
        if isinstance(text, str)
        else zip(("sentence A", "sentence B"), text, strict=True)
    )
    for name, part in named:
        if not part.strip():
            raise InputError(None, f"{name} is empty: give a sentence to capture")
    check_generate(args)
    if args.out:
        check_output(args.out, args.overwrite)  # before any work
    gens = None
    if args.generate is not None:
        gens, caps, _ = capture_generated(
            args,
            [text],
            args.what,
            dtype=args.dtype,
            query_positions=args.query_positions,
            key_positions=args.key_positions,
        )
    else:
        caps = _capture(args, text)
    if not caps:
        what = (
            f"its tokens + {args.generate} new tokens (--generate) exceed the model's positions"
            if args.generate is not None
            else "the text is longer than the model's limit"
        )
        print(f"skipped: {what} (--too-long skip)")
        return 0
    cap = caps[0]
    print(" ".join(cap.tokens))
    if cap.truncated:
        print(f"truncated to the model's limit of {cap.length} tokens (--too-long truncate)")
    if gens:
        print(describe(gens[0]))
    if cap.sentence_b_start is not None:
        print(f"sentence B starts at token {cap.sentence_b_start}")
    print(
        f"layers {list(cap.layers)}  heads {list(cap.heads)}  dtype {cap.dtype}  "
        f"precision {cap.precision}"
    )
    if cap.kv_heads and {"keys", "values"} & set(cap.tensors):  # grouped-query attention
        print(
            f"keys/values: key/value heads {list(cap.key_value_heads)} "
            f"(query heads {list(cap.heads)} read {list(cap.kv_heads)})"
        )
    for field in ("query_positions", "key_positions"):
        if getattr(cap, field) is not None:
            print(f"maps' {field.replace('_', ' ')} {list(getattr(cap, field))}")
    for name, array in cap.tensors.items():
        print(f"  {name:18s} {list(array.shape)} {array.dtype} ({array.nbytes} bytes)")
    if args.out:
        cap.save(ensure_parent(args.out))
        print(f"saved to {args.out}")
    return 0


def _capture(args, text) -> list:
    """The capture of `text` from the local engine or the server."""
    with open_source(args) as source:
        return source.capture(
            [text],
            what=args.what,
            layers=args.layers,
            heads=args.heads,
            dtype=args.dtype,
            too_long=args.too_long,
            precision=args.precision,
            query_positions=args.query_positions,
            key_positions=args.key_positions,
        )
