"""The `jaxattn` command line: one module per subcommand, registered here.

Each subcommand module defines ``register(subparsers)`` which adds its parser and
sets ``func`` to a callable taking the parsed args and returning an exit code.
Heavy imports (jax, grpc, torch) happen inside those callables, so ``jaxattn
--help`` is instant. What several commands share: `args` (the common flags,
parsed one way), `source` (`open_source`: the engine or server a command
captures with); the progress line is `jaxattn.progress`. `serve_cmd` is the
only module that reaches the `service` package.

The subcommands (`_SUBCOMMANDS`): `demo_cmd`, `serve_cmd`, `capture_cmd`,
`convert_cmd`, `bench_cmd`, `analyze_cmd`, `dump_cmd`, `view_cmd`, `web_cmd`,
`loadtest_cmd`, `cache_cmd`. Their parts: `parser` (one-line usage errors, the nearest
spelling), `model_arg` (--model), `corpus` (what view and analyze share: INPUT,
capturing with counts), `saved` (INPUT that is captures already), `analysis_flags`,
`analyze_saved` and `decoder_analyses` (analyze's flags, saved captures, the
analyses that need a decoder itself), `view_compare`, `view_global` and
`view_segments` (view --compare, --global, --stats-first), `generated` (capture's
and view's --generate N).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from jaxattn.cli.args import join_selections
from jaxattn.errors import GENERATION_TOO_LONG_ADVICE, JaxattnError

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
    "jaxattn.cli.cache_cmd",
)


# Under `jaxattn --help`: what to type first (the embedded model needs no download).
FIRST_STEPS = """first steps, with the embedded all-MiniLM-L6-v2 (no download):
  jaxattn capture "The cat sat."                  its tokens and tensors
  jaxattn view "The cat sat." --out cat.html      the views, in one HTML page
  jaxattn analyze corpus.txt --out report.json    the papers' analyses
  jaxattn demo                                    serve, capture, summarise
`jaxattn COMMAND --help` lists a command's options."""


def build_parser() -> argparse.ArgumentParser:
    import jaxattn
    from jaxattn.cli.parser import Parser

    parser = Parser(
        prog="jaxattn",
        description="Capture, serve, analyse and view the attention of encoders and "
        "decoders. Exit codes: 0 done, 1 the command failed (bad input data, checkpoint, "
        "server, memory), 2 the command line is wrong (docs/errors.md lists the messages).",
        epilog=FIRST_STEPS,
    )
    parser.add_argument("--version", action="version", version=f"jaxattn {jaxattn.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _SUBCOMMANDS:
        importlib.import_module(name).register(sub)
    parser.commands = sub.choices  # name -> its parser: unknown options are its to report
    for command in parser.commands.values():  # an option of another command names it
        command.siblings = {n: p for n, p in parser.commands.items() if p is not command}
    return parser


# OSErrors about a path the user named: the command line is wrong (exit 2).
_PATH_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, FileExistsError)


def main(argv: list[str] | None = None) -> int:
    """Run one command; errors become one line on stderr and an exit code (module doc).

    As the process's entry point (argv None), Ctrl-C is the `_Interrupt` policy.
    """
    parser = build_parser()
    entry = argv is None
    argv = join_selections(sys.argv[1:] if argv is None else list(argv))
    try:
        if not argv:  # `jaxattn` alone: what to type next
            parser.error(f"give a COMMAND: {', '.join(parser.commands)}")
        args, extra = parser.parse_known_args(argv)
        if extra:  # unknown options were answered already: texts left over, mostly
            command = parser.commands[args.command]
            command.error(command.unexpected(extra))
    except SystemExit as e:  # a usage error (one line already written), --help, --version
        return e.code if isinstance(e.code, int) else 2
    interrupt = _Interrupt.install() if entry else None
    try:
        code = int(args.func(args) or 0)
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:  # `jaxattn ... | head`: the reader left, nothing to say
        return 1
    except Exception as e:  # noqa: BLE001 (every error is answered in one line)
        if os.environ.get("JAXATTN_TRACEBACK"):
            raise
        code, message = explain(e)
        _say(args, message)
        return code
    if code == 130 or (interrupt is not None and interrupt.pressed):
        _say(args, "interrupted" + _INTERRUPTED.get(args.command, ""))
        if interrupt is not None:
            interrupt.exit()
        return 130
    return code


# command -> what its "interrupted" line adds: what became of its output.
_INTERRUPTED = {
    "dump": " (the finished shards are kept: run the same command again to resume)",
}


class _Interrupt:
    """Ctrl-C in the `jaxattn` process: a KeyboardInterrupt, as usual, that is also
    remembered, so one raised where Python drops it (a garbage-collector callback of
    jax's) still ends the command with 130; a second Ctrl-C ends the process at once.
    The process then leaves with os._exit: an interpreter teardown while XLA's
    compiler threads still run can crash (a segfault, exit 139). Outputs are written
    whole or not at all (`jaxattn.outfile`) and dump stores resume, so nothing is lost
    that a normal exit would keep."""

    def __init__(self):
        self.pressed = False

    @classmethod
    def install(cls) -> _Interrupt | None:
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            return None
        interrupt = cls()
        signal.signal(signal.SIGINT, interrupt._on_sigint)
        return interrupt

    def _on_sigint(self, signum, frame) -> None:
        if self.pressed:
            self.exit()
        self.pressed = True
        raise KeyboardInterrupt

    @staticmethod
    def exit() -> None:
        import shutil

        corpus = sys.modules.get("jaxattn.cli.corpus")  # os._exit runs no atexit handler
        for tmp in getattr(corpus, "SPOOLED", ()):
            shutil.rmtree(tmp, ignore_errors=True)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(130)


def explain(error: Exception) -> tuple[int, str]:
    """(exit code, one-line message) for an error a command raised."""
    if isinstance(error, JaxattnError):
        code = getattr(error, "code", None)
        if code is not None and hasattr(error, "message"):  # a failed call to a server
            return _server_failure(error)
        return error.exit_code, error.cli_message()
    if isinstance(error, _PATH_ERRORS):
        return 2, _os_message(error)
    if isinstance(error, UnicodeError):  # text that is not UTF-8 met a library first
        return 1, f"text that is not valid UTF-8: {error}"
    if isinstance(error, ValueError):  # a library's argument check (jaxattn's are above)
        return 2, str(error)
    if isinstance(error, OSError):  # permissions, a full disk, a broken device
        return 1, _os_message(error)
    if isinstance(error, MemoryError):
        return 1, "out of host memory: capture fewer or shorter texts at a time (--limit)"
    return 1, (
        f"internal error ({type(error).__name__}: {error}); please report it with the "
        "command line. JAXATTN_TRACEBACK=1 shows the traceback"
    )


def _server_failure(error) -> tuple[int, str]:
    """A server's refusal or an unreachable server, in one line. A request field the
    server refused (other than a text) is the command line's fault: exit 2, as locally;
    so is a prompt + --generate N over the positions (the local GenerationTooLongError's
    exit 2: the number asked for is what does not fit; the server's message carries
    its advice)."""
    name = getattr(error.code, "name", str(error.code))
    address = getattr(error, "address", None)
    where = f" at {address}" if address else ""
    if name == "UNAVAILABLE":
        return 1, f"could not reach the server{where} (UNAVAILABLE): {error.message}"
    field = getattr(error, "field", None) or ""
    invalid = name == "INVALID_ARGUMENT"
    generation = invalid and GENERATION_TOO_LONG_ADVICE.wire in error.message
    code = 2 if invalid and field and (generation or not field.startswith("texts")) else 1
    from jaxattn.client.errors import in_terms  # the wire's advice, in the flags' terms

    return code, f"the server{where} answered {name}: {in_terms(error.message, 'flags')}"


def _os_message(error: OSError) -> str:
    if error.filename is None or str(error.filename) in str(error.args[-1]):
        return str(error.args[-1]) if error.args else str(error)
    return f"{error.filename}: {error.strerror or error}"


def _say(args, message: str) -> None:
    line = " ".join(message.split())  # one line, whatever the message held
    # A non-UTF-8 argument comes back in messages as lone surrogates: show them escaped.
    line = line.encode("utf-8", "backslashreplace").decode("utf-8")
    print(f"jaxattn {args.command}: error: {line}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
