"""--generate N: a decoder continues each text on the local engine, then the capture
holds prompt + continuation (`jaxattn.engine.generate`), for `capture` and `view`
(`dump` checks its flags here and generates shard by shard: `jaxattn.dump.shard`)."""

from __future__ import annotations

import types

from jaxattn.cli.source import open_source
from jaxattn.errors import UsageError


def check_generate(args) -> None:
    """UsageError for --generate with a server (it does not generate), or --ignore-eos alone."""
    if args.generate is None:
        if args.ignore_eos:
            raise UsageError("--ignore-eos applies to --generate N: give --generate too")
        return
    if args.server:
        raise UsageError(
            f"--generate {args.generate} runs on a local engine (a server captures texts, it "
            "does not generate): drop --server and name the decoder with --model"
        )


def capture_generated(args, texts: list, what, **spec) -> tuple[list, list, types.SimpleNamespace]:
    """(each text's Generation or None where --too-long skip left it out, the kept texts'
    Captures of prompt + continuation, the indices of the `truncated` and `skipped`
    texts for `jaxattn.cli.corpus.report`) from the local engine under the command's
    --layers/--heads/--precision/--too-long; `spec`: the command's own flags of the
    capture (capture's dtype and positions)."""
    from jaxattn.engine.generate import generate_and_capture

    check_generate(args)
    with open_source(args) as engine:
        gens, caps = generate_and_capture(
            engine,
            texts,
            args.generate,
            stop_at_eos=not args.ignore_eos,
            what=what,
            layers=args.layers,
            heads=args.heads,
            precision=args.precision,
            too_long=args.too_long,
            **spec,
        )
    counts = types.SimpleNamespace(
        truncated=[i for i, g in enumerate(gens) if g is not None and g.prompt.truncated],
        skipped=[i for i, g in enumerate(gens) if g is None],
    )
    return gens, caps, counts


def describe(gen) -> str:
    """One line on a continuation: how many tokens, where they start, why it ended, its text."""
    from jaxattn.engine.generate import STOPS

    return (
        f"generated {len(gen.ids)} token(s) from token {gen.generated_start}, stopped "
        f"{STOPS[gen.stop]}: {gen.text!r}"
    )
