"""The bad-input table covers the real parsers: every option of every command has a row
(tests/cli/bad_inputs.py) or is named as taking any value, and commands read their
options as attributes, so a misspelt name fails instead of giving a default."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

from bad_inputs import ANY_VALUE, COMMANDS, PARSERS, cases, covered, option_name

ROOT = Path(__file__).resolve().parents[2]


def _options(parser: argparse.ArgumentParser) -> list[str]:
    """The options of a command that take a value (a switch has no bad value)."""
    return [
        option_name(a)
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction) and a.nargs != 0
    ]


def test_every_option_has_a_bad_row_or_takes_any_value():
    rows: dict[str, set[str]] = {c: set() for c in PARSERS}
    for command, bad in cases():
        rows[command] |= covered(command, bad)
    missing = []
    for command, parser in PARSERS.items():
        for option in _options(parser):
            listed = f"{command} {option}" in ANY_VALUE or option in ANY_VALUE
            if option not in rows[command] and not listed:
                missing.append(f"{command} {option}")
    assert not missing, (
        f"no bad-input row for {missing}: add one to BAD in tests/cli/bad_inputs.py, or "
        "name the option in ANY_VALUE with the reason it takes any value"
    )


def test_any_value_names_real_options_that_no_row_covers():
    every = {f"{c} {o}" for c, p in PARSERS.items() for o in _options(p)}
    names = {o for c, p in PARSERS.items() for o in _options(p)}
    for key in ANY_VALUE:
        assert key in every or key in names, f"ANY_VALUE names no option: {key!r}"
    for command, bad in cases():
        for option in covered(command, bad):
            assert f"{command} {option}" not in ANY_VALUE, f"{command} {option} has a row"


def test_every_command_has_a_template_of_its_real_options():
    assert set(COMMANDS) == set(PARSERS)
    for command, template in COMMANDS.items():
        known = PARSERS[command]._option_string_actions
        assert template[0] == command
        for part in template[1:]:
            assert not part.startswith("-") or part in known, f"{command} has no {part}"


def _default_reads(path: Path) -> list[str]:
    """`getattr(args, name, default)` calls: a misspelt name would give the default."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) == 3
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == "args"
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_commands_read_their_options_as_attributes():
    found = [
        where
        for package in ("jaxattn/cli", "service")
        for path in sorted((ROOT / package).rglob("*.py"))
        for where in _default_reads(path)
    ]
    assert not found, (
        f"getattr(args, NAME, DEFAULT) at {found}: read args.NAME, and give the commands "
        "without the option a default (set_defaults) so the attribute always exists"
    )
