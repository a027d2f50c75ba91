"""The parser class of every command: help, one-line usage errors, and the nearest spelling.

`Parser` is argparse with three changes:

- every option's default in its help, and examples kept as written (`HelpFormatter`);
- a usage error is one line naming the command and its --help (exit 2);
- no prefix matching (``allow_abbrev=False``): ``view --layer 2`` is an unknown
  option, not a silent ``--layers 2``. An unknown option, command or choice is
  answered with the nearest spellings of what THAT command takes ("did you mean
  --out?", `nearest`); an option that only other commands take names them.

A command's parser checks its options before argparse reads them
(`Parser.parse_known_args`), so a misspelt option is reported as such, not as the
required option it was meant to be or as a text it swallowed.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Iterable, Mapping

# What argparse reads as a value, not an option, though it starts with "-": a negative
# number or a selection ("-1", "-2:", "-.5"), standard input ("-"), a text with a space.
_NOT_AN_OPTION = re.compile(r"-|-[\d.:].*|.*\s.*", re.DOTALL)
_HELP = ("-h", "--help")


class HelpFormatter(argparse.HelpFormatter):
    """Appends "(default: X)" to an option's help unless it says its default already;
    a description or epilog written in lines keeps them (examples line up)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or not action.option_strings
            or default in (None, False, argparse.SUPPRESS)
            or isinstance(action, argparse._HelpAction | argparse._VersionAction)
        ):
            return text
        if isinstance(default, tuple):
            default = ",".join(str(d) for d in default)
        return f"{text} (default: {str(default).replace('%', '%%')})"


def nearest(word: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The choices `word` most likely meant, at most `n`: those it abbreviates (what
    argparse's prefix matching would have taken), else those it ends with after a dash
    (a longer spelling: --global-seed for --seed), else the close spellings, best first
    (difflib; the leading dashes of options are not compared)."""
    bare = {str(c).lstrip("-"): str(c) for c in choices}
    typed = word.lstrip("-")
    prefixed = [c for b, c in bare.items() if typed and b.startswith(typed) and c != word]
    suffixed = [c for b, c in bare.items() if b and typed.endswith(f"-{b}") and c != word]
    close = difflib.get_close_matches(typed, [b for b in bare if bare[b] != word], n, 0.6)
    return (prefixed or suffixed or [bare[b] for b in close])[:n]


def did_you_mean(names: list[str], quote: bool = False) -> str:
    """'did you mean --a?' / '--a or --b?' / '--a, --b or --c?' ('' for none)."""
    names = [repr(n) if quote else n for n in names]
    return f"did you mean {_listed(names, 'or')}?" if names else ""


def _listed(names: list[str], conjunction: str) -> str:
    """'a', 'a or b', 'a, b or c'."""
    if len(names) == 1:
        return names[0]
    return f"{', '.join(names[:-1])} {conjunction} {names[-1]}"


class Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit 2), no abbreviations, and suggestions.

    Attributes:
      siblings: the other commands' parsers, by name (set by `jaxattn.cli.build_parser`):
        an option this command lacks but they take is answered with their names.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("allow_abbrev", False)  # subcommands' parsers inherit the class
        super().__init__(*args, **kwargs)
        self.siblings: Mapping[str, Parser] = {}

    def error(self, message: str):
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        sys.exit(2)

    def options(self) -> list[str]:
        """The option strings this parser takes and shows in its help."""
        return [
            flag
            for action in self._actions
            if action.help != argparse.SUPPRESS
            for flag in action.option_strings
        ]

    def parse_known_args(self, args=None, namespace=None):
        if self._subparsers is None and args is not None:  # a command: check its options
            self._check_options(list(args))
        return super().parse_known_args(args, namespace)

    def _check_options(self, args: list[str]) -> None:
        known = {f for action in self._actions for f in action.option_strings}
        words = args[: args.index("--")] if "--" in args else args
        if any(w in _HELP for w in words):
            return  # --help answers first
        for word in words:
            flag = word.split("=", 1)[0]
            if not word.startswith("-") or _NOT_AN_OPTION.fullmatch(word) or flag in known:
                continue
            if word[1] != "-" and word[:2] in known:  # a short option and its value: -n5
                continue
            self.error(self.unknown_option(flag))

    def unknown_option(self, flag: str) -> str:
        """'unknown option --output: did you mean --out?' (or the commands that take it)."""
        if flag == "--version":  # jaxattn's own option, not a command's ("--precision?")
            return "unknown option --version: the version is jaxattn's: jaxattn --version"
        hint = did_you_mean(nearest(flag, self.options()))
        if not hint:
            others = [name for name, p in self.siblings.items() if flag in p.options()]
            command = self.prog.rsplit(" ", 1)[-1]
            if others:
                verb = "takes" if len(others) == 1 else "take"
                hint = f"{command} has no {flag}; {_listed(others, 'and')} {verb} it"
        return f"unknown option {flag}" + (f": {hint}" if hint else "")

    def unexpected(self, extra: list[str]) -> str:
        """The message for arguments left over after parsing (`jaxattn.cli.main`)."""
        for word in extra:
            if word.startswith("-") and not _NOT_AN_OPTION.fullmatch(word):
                return self.unknown_option(word.split("=", 1)[0])
        takes = " ".join(_usage(a) for a in self._actions if not a.option_strings)
        quote = any("TEXT" in _usage(a) for a in self._actions if not a.option_strings)
        return (
            f"unexpected argument{'s' * (len(extra) > 1)} {' '.join(map(repr, extra))}: "
            f"{self.prog} takes {takes or 'no arguments but options'}"
            + ("; put a text that has spaces in quotes" if quote else "")
        )

    def _check_value(self, action, value):  # argparse's check of a value against choices
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as e:
            command = isinstance(action, argparse._SubParsersAction)
            hint = did_you_mean(nearest(str(value), action.choices), quote=not command)
            if command:
                hint = hint or f"the commands are {', '.join(action.choices)}"
                raise argparse.ArgumentError(None, f"unknown command {value!r}: {hint}") from None
            message = f"{e.message}: {hint}" if hint else e.message
            raise argparse.ArgumentError(action, message) from None


def _usage(action: argparse.Action) -> str:
    """A positional argument as the usage line writes it: TEXT, [TEXT_B], [INPUT ...]."""
    name = action.metavar or action.dest
    return {"?": f"[{name}]", "*": f"[{name} ...]", "+": f"{name} [{name} ...]"}.get(
        action.nargs, name
    )
