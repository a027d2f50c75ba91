"""`jaxattn bench`: the capture benchmark of issue 2 (see `jaxattn.bench.capture`)."""

from __future__ import annotations

from pathlib import Path

from jaxattn.bench.corpus import DEFAULT_CONLLU
from jaxattn.cli.args import add_source_arguments


def register(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmark capture against transformers' eager attention",
        description="Time (a) transformers eager + output_attentions, (b) jaxattn forward, "
        "(c) jaxattn attention, (d) jaxattn full capture on real sentences.",
    )
    p.add_argument("--conllu", type=Path, default=DEFAULT_CONLLU,
                   help="sentences to use, any input format (default: UD EWT dev)")  # fmt: skip
    p.add_argument("-n", type=int, default=512, help="first N sentences (file order)")
    p.add_argument("--repeats", type=int, default=3, help="best of this many timed passes")
    add_source_arguments(p, server=False)
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    p.add_argument(
        "--synthetic-bert-base",
        type=int,
        metavar="T",
        help="instead: a random-weight BERT-base and -n texts of exactly T tokens "
        "(the GPU benchmark; torch uses CUDA when present)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    import json

    from jaxattn.bench import capture as bench

    if args.synthetic_bert_base:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            model, texts = bench.synthetic_bert_base(Path(tmp), args.synthetic_bert_base, args.n)
            result = bench.run(None, args.n, args.repeats, str(model), texts=texts)
    else:
        if not args.conllu.is_file():
            raise FileNotFoundError(f"no input file at {args.conllu} (pass --conllu)")
        result = bench.run(args.conllu, args.n, args.repeats, args.model)
    print(bench.format_result(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0
