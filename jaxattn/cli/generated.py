"""--generate N: a decoder continues each text, then the capture holds prompt +
continuation (`jaxattn.engine.generate`), for `capture` and `view`: on the local engine,
or with --server on the server (CaptureRequest.generate), which says in its ModelInfo
whether it generates and how many tokens at most. (`dump` checks its flags here and
generates shard by shard on the local engine: `jaxattn.dump.shard`.)"""

from __future__ import annotations

import dataclasses
import types

from jaxattn.cli.source import open_source
from jaxattn.continuations import STOPS
from jaxattn.errors import UsageError


@dataclasses.dataclass(frozen=True)
class Served:
    """A continuation as a server's capture tells it (the `describe` of a Generation):
    its tokens, where they start, why it ended; no ids or text (the client has no
    tokenizer)."""

    tokens: tuple[str, ...]
    generated_start: int
    stop: str
    text: None = None

    @classmethod
    def of(cls, cap, new: int, max_positions: int) -> Served:
        """The continuation of a capture of prompt + continuation asked for `new` tokens,
        its stop as the server says it (ExampleHeader.stop: `Capture.stop`)."""
        tokens = cap.tokens[cap.generated_start :]
        # A server that predates ExampleHeader.stop sends none: inferred from the
        # lengths, at max_new_tokens when it has them all, at the positions' end when
        # it fills them, else (the only other reason) at the EOS token (an EOS that
        # is also the new-th token reads as max_new_tokens there).
        if cap.stop is not None:
            stop = cap.stop
        elif len(tokens) == new:
            stop = "max_new_tokens"
        elif len(cap.tokens) >= max_positions:
            stop = "limit"
        else:
            stop = "eos"
        return cls(tokens, cap.generated_start, stop)


def check_generate(args) -> None:
    """UsageError for --ignore-eos without --generate."""
    if args.generate is None and args.ignore_eos:
        raise UsageError("--ignore-eos applies to --generate N: give --generate too")


def check_served(client, new: int, server: str) -> int:
    """The server's max_positions once its ModelInfo says it generates `new` tokens
    (UsageError otherwise, before any capture: a server that predates generation would
    ignore the request's field)."""
    info = client.server_info()
    if not info.max_new_tokens:
        raise UsageError(
            f"--generate {new}: the server {server} does not generate (its model is an "
            "encoder or a decoder without its next-token head, it was started with "
            "--max-new-tokens 0, or it predates generation): drop --server and name "
            "the decoder with --model"
        )
    if new > info.max_new_tokens:
        raise UsageError(
            f"--generate {new}: the server {server} generates at most "
            f"{info.max_new_tokens} new tokens per request (jaxattn serve --max-new-tokens)"
        )
    return info.max_positions


def capture_generated(args, texts: list, what, **spec) -> tuple[list, list, types.SimpleNamespace]:
    """(each text's Generation (with --server, its `Served` continuation) or None where
    --too-long skip left it out, the kept texts' Captures of prompt + continuation, the
    indices of the `truncated` and `skipped` texts for `jaxattn.cli.corpus.report`) under
    the command's --layers/--heads/--precision/--too-long; `spec`: the command's own
    flags of the capture (capture's dtype and positions)."""
    check_generate(args)
    if args.server:
        return _served(args, texts, what, **spec)
    from jaxattn.engine.generate import generate_and_capture

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


def _served(args, texts: list, what, **spec) -> tuple[list, list, types.SimpleNamespace]:
    """`capture_generated` through --server (`AttentionClient.capture_iter`)."""
    with open_source(args) as client:
        limit = check_served(client, args.generate, args.server)
        stream = client.capture_iter(
            texts,
            what=what,
            layers=args.layers,
            heads=args.heads,
            dtype=spec.pop("dtype", "float32"),
            too_long=args.too_long or "error",
            precision=args.precision,
            generate=args.generate,
            stop_at_eos=not args.ignore_eos,
            **spec,
        )
        caps = list(stream)
    kept = iter(caps)
    skipped = set(stream.skipped)
    gens = [
        None if i in skipped else Served.of(next(kept), args.generate, limit)
        for i in range(len(texts))
    ]
    counts = types.SimpleNamespace(truncated=list(stream.truncated), skipped=sorted(skipped))
    return gens, caps, counts


def describe(gen) -> str:
    """One line on a continuation: how many tokens, where they start, why it ended, its
    text (from a server: its tokens)."""
    said = repr(gen.text) if gen.text is not None else " ".join(gen.tokens)
    return (
        f"generated {len(gen.tokens)} token(s) from token {gen.generated_start}, stopped "
        f"{STOPS[gen.stop]}: {said}"
    )
