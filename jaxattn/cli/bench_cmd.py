"""`jaxattn bench`: the capture benchmark of issue 2 (see `jaxattn.bench.capture`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jaxattn import outfile
from jaxattn.bench.sentences import DEFAULT_CONLLU
from jaxattn.bench.synthetic import SHAPES
from jaxattn.cli.args import (
    add_overwrite_argument,
    add_precision_argument,
    add_source_arguments,
    check_output,
    engine_options,
    ensure_parent,
    positive,
)
from jaxattn.cli.corpus import check_corpus
from jaxattn.errors import UsageError


def register(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmark capture against transformers' eager attention",
        description="Time (a) transformers eager + output_attentions, (b) jaxattn forward, "
        "(c) jaxattn attention, (d) jaxattn full capture, (e) attention as uint8, (f) "
        "transformers' plain forward, on real sentences, and the rate the host takes their "
        "bytes at against a plain copy.",
    )
    p.add_argument(
        "--conllu",
        type=Path,
        default=DEFAULT_CONLLU,
        help="sentences to use, any input format (default: the UD English EWT dev "
        "split shipped with jaxattn)",
    )
    p.add_argument(
        "--limit",
        "-n",
        dest="n",
        type=positive,
        default=512,
        help="the first N sentences, in file order (default 512)",
    )
    p.add_argument(
        "--repeats", type=positive, default=3, help="best of this many timed passes (default 3)"
    )
    add_source_arguments(p, server=False)
    p.add_argument("--json", default=None, help="also write the figures here")
    add_overwrite_argument(p)
    p.add_argument(
        "--synthetic",
        metavar="NAME",
        choices=sorted(SHAPES),
        help="instead of --model: a random-weight base-size model ("
        + ", ".join(SHAPES)
        + ") on --conllu's sentences (default: off)",
    )
    p.add_argument(
        "--tokens",
        type=_token_count,
        default=None,
        help="with --synthetic: -n texts of exactly this many tokens, as the "
        "model's tokenizer counts them, instead of the sentences (default: off)",
    )
    p.add_argument(
        "--random-bert-base",
        action="store_true",
        help="a random-weight BERT-base on the real sentences of --conllu (the "
        "GPU benchmark on real lengths)",
    )
    add_precision_argument(p, default="highest")
    # jaxattn.engine.layer_loop.LAYER_LOOPS, spelled out: the CLI imports no jax to register.
    p.add_argument(
        "--layer-loop",
        choices=("auto", "unrolled", "scan"),
        default=None,
        help="run the layer stack unrolled or as a scan over stacked weights "
        "(faster compiles); auto: scan on GPUs/TPUs, unrolled on the CPU "
        "(default: $JAXATTN_LAYER_LOOP, else auto)",
    )
    p.add_argument(
        "--too-long",
        choices=("error", "skip"),
        default="error",
        help="a sentence over the model's maximum length: stop with an error, or "
        "leave it out (no truncate: the transformers reference takes whole texts) "
        "(default error)",
    )
    p.set_defaults(func=run)


def _token_count(value: str) -> int:
    """A synthetic text's length in tokens: [CLS], at least one word, [SEP]."""
    n = positive(value)
    if n < 3:
        raise argparse.ArgumentTypeError(
            f"{n} tokens cannot hold a word between [CLS] and [SEP]: give at least 3"
        )
    return n


def _progress(line: str) -> None:
    """A step of the run as it ends, on stderr (the table comes at the end, on stdout)."""
    print(f"bench: {line}", file=sys.stderr, flush=True)


def run(args) -> int:
    import json
    import time

    from jaxattn.bench import capture as bench

    if args.json:
        check_output(args.json, args.overwrite, "--json")
    if args.tokens and not args.synthetic:
        raise UsageError("--tokens goes with --synthetic NAME (a random-weight model)")
    if args.synthetic and args.random_bert_base:
        raise UsageError(
            "--synthetic NAME and --random-bert-base exclude each other (the "
            "latter is --synthetic bert-base)"
        )
    if args.synthetic or args.random_bert_base:
        import tempfile

        from jaxattn.bench.synthetic import random_checkpoint

        if args.model:
            raise UsageError(
                "--model and a random-weight model (--synthetic, "
                "--random-bert-base) exclude each other"
            )
        if not args.tokens:
            check_corpus(args.conllu, "--conllu")
        with tempfile.TemporaryDirectory() as tmp:
            name = args.synthetic or "bert-base"
            t = time.perf_counter()
            model = str(random_checkpoint(name, Path(tmp)))
            _progress(f"made a random {name} checkpoint in {time.perf_counter() - t:.1f} s")
            result = bench.run(
                args.conllu,
                args.n,
                args.repeats,
                model,
                tokens=args.tokens,
                precision=args.precision,
                too_long=args.too_long,
                layer_loop=args.layer_loop,
                progress=_progress,
                **engine_options(args),
            )
        result["model"] = f"{name} (random weights)"
    else:
        check_corpus(args.conllu, "--conllu")
        result = bench.run(
            args.conllu,
            args.n,
            args.repeats,
            args.model,
            precision=args.precision,
            too_long=args.too_long,
            layer_loop=args.layer_loop,
            progress=_progress,
            **engine_options(args),
        )
    print(bench.format_result(result))
    if args.json:
        outfile.write_text(ensure_parent(args.json), json.dumps(result, indent=2) + "\n")
    return 0
