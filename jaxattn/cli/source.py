"""`open_source`: the engine or the server a command captures with.

Every command with --model/--server gets its captures here, from one
`jaxattn.CaptureSource`: the local engine (--model, default the embedded
model) or an `AttentionClient` of --server.
"""

from __future__ import annotations

import argparse

from jaxattn.cli.args import engine_flags, engine_options, read_flag_file, read_token
from jaxattn.errors import UsageError
from jaxattn.source import CaptureSource


def open_source(args: argparse.Namespace) -> CaptureSource:
    """The capture source the command's arguments name (see `add_source_arguments`).

    A server source uses --codec. Close it when done (or use it as a context
    manager). --model with --server is accepted only when the server serves
    those weights; --tls-ca or --token-file without --server is refused.
    """
    for flag, given in (("--tls-ca", args.tls_ca), ("--token-file", args.token_file)):
        if given and not args.server:  # a forgotten --server: not a local capture instead
            raise UsageError(
                f"{flag} is for a --server, and none is given (this would capture with a "
                f"local engine): add --server HOST:PORT, or drop {flag}"
            )
    if args.server and engine_flags(args):
        flag = engine_flags(args)[0]
        raise UsageError(
            f"{flag} sets how a local engine runs (--model); a --server runs its own: "
            f"start it with `jaxattn serve {flag} ...`"
        )
    if args.server:
        from jaxattn.client import AttentionClient

        if args.tls_ca:  # a missing file named with its flag (the client checks it is PEM)
            read_flag_file("--tls-ca", args.tls_ca)

        client = AttentionClient(
            args.server.split(","),
            token=read_token(args.token_file),
            root_certificates=args.tls_ca,
            timeout=args.timeout,
            codec=args.codec,
        )
        if args.model:
            try:
                check_same_model(client, args.model, args.server)
            except BaseException:
                client.close()
                raise
        return client
    import jaxattn  # the module attribute, so tests can stand in an engine

    return jaxattn.load(args.model, **engine_options(args))


def describe(args: argparse.Namespace) -> str:
    """Where the captures come from, in words ("local engine", "server HOST:PORT")."""
    return f"server {args.server}" if args.server else "local engine"


def check_same_model(client, model, server: str) -> None:
    """UsageError unless the server serves the weights of the model `model` names.

    A Hub model is compared by its commit when the server reports one (only its
    config.json is fetched); otherwise by weights fingerprint (the model name
    when the server reports none).
    """
    from jaxattn.checkpoints.model_ref import parse_model

    info = client.model_info()
    ref = parse_model(model)
    if ref.hub and info.revision:
        from jaxattn.checkpoints.hub import resolve_commit

        same = resolve_commit(ref.name, ref.revision) == info.revision
    else:
        from jaxattn.checkpoints import read_checkpoint
        from jaxattn.engine.params import fingerprint

        config, params = read_checkpoint(ref)
        if info.weights:
            same = fingerprint(params["encoder"]) == info.weights
        else:
            same = config.name == info.name
    if not same:
        served = f"{info.name}@{info.revision}" if info.revision else info.name
        raise UsageError(
            f"--model {model} is not the model the server {server} serves ({served}, "
            f"{info.layers} layers x {info.heads} heads): drop --model to use the server's "
            "model, or drop --server to capture with --model locally"
        )
