"""The `jaxattn` command line: one module per subcommand, registered here.

Each subcommand module defines ``register(subparsers)`` which adds its parser and
sets ``func`` to a callable taking the parsed args and returning an exit code.
Heavy imports (jax, grpc, torch) happen inside those callables, so ``jaxattn
--help`` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Subcommand modules, in --help order. Add a module here to add a subcommand.
_SUBCOMMANDS = (
    "jaxattn.cli.demo_cmd",
    "jaxattn.cli.serve_cmd",
    "jaxattn.cli.capture_cmd",
    "jaxattn.cli.convert_cmd",
    "jaxattn.cli.bench_cmd",
    "jaxattn.cli.analyze_cmd",
    "jaxattn.cli.dump_cmd",
    "jaxattn.cli.view_cmd",
    "jaxattn.cli.web_cmd",
    "jaxattn.cli.loadtest_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jaxattn", description="Capture, serve, analyse and view encoder attention."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _SUBCOMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as e:
        # Bad input is the user's to fix: say what is wrong, no traceback.
        print(f"jaxattn {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
