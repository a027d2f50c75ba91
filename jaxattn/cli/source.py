"""`open_source`: the engine or the server a command captures with.

Every command with --model/--server gets its captures here, from one
`jaxattn.CaptureSource`: the local engine (--model, default the embedded
model) or an `AttentionClient` of --server.
"""

from __future__ import annotations

import argparse

from jaxattn.cli.args import read_token
from jaxattn.source import CaptureSource


def open_source(args: argparse.Namespace) -> CaptureSource:
    """The capture source the command's arguments name (see `add_source_arguments`).

    A server source uses --codec when the command has it, else zstd. Close it
    when done (or use it as a context manager).
    """
    if getattr(args, "server", None):
        from jaxattn.client import AttentionClient

        return AttentionClient(
            args.server.split(","),
            token=read_token(args.token_file),
            root_certificates=args.tls_ca,
            timeout=args.timeout,
            codec=getattr(args, "codec", "zstd"),
        )
    import jaxattn  # the module attribute, so tests can stand in an engine

    return jaxattn.load(getattr(args, "model", None))


def describe(args: argparse.Namespace) -> str:
    """Where the captures come from, in words ("local engine", "server HOST:PORT")."""
    return f"server {args.server}" if getattr(args, "server", None) else "local engine"
