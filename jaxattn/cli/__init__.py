"""The `jaxattn` command line: one module per subcommand, registered here.

Each subcommand module defines ``register(subparsers)`` which adds its parser and
sets ``func`` to a callable taking the parsed args and returning an exit code.
Heavy imports (jax, grpc, torch) happen inside those callables, so ``jaxattn
--help`` is instant. What several commands share: `args` (the common flags,
parsed one way), `source` (`open_source`: the engine or server a command
captures with); the progress line is `jaxattn.progress`. `serve_cmd` is the
only module that reaches the `service` package.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from jaxattn.errors import JaxattnError

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
    import jaxattn

    parser = argparse.ArgumentParser(
        prog="jaxattn", description="Capture, serve, analyse and view encoder attention."
    )
    parser.add_argument("--version", action="version", version=f"jaxattn {jaxattn.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _SUBCOMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, JaxattnError) as e:
        # Bad input (or a server's refusal) is the user's to fix: say what is wrong,
        # no traceback.
        print(f"jaxattn {args.command}: error: {_message(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _message(error: Exception) -> str:
    code, address = getattr(error, "code", None), getattr(error, "address", None)
    if code is not None and hasattr(error, "message"):  # a failed call to a server
        where = f" at {address}" if address else ""
        return f"the server{where} answered {getattr(code, 'name', code)}: {error.message}"
    return str(error)


if __name__ == "__main__":
    sys.exit(main())
