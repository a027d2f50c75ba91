"""A mistyped command line gets the nearest spelling of what that command takes, in one
line, and no option is taken for another by its prefix (argparse's allow_abbrev)."""

from __future__ import annotations

import pytest

from jaxattn.cli import build_parser, main
from jaxattn.cli.parser import nearest


def _error(capsys, argv: list[str]) -> str:
    """The one stderr line of a command line that is wrong (exit 2, nothing on stdout)."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1, err
    return err.strip()


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            ["capture", "hi", "--output", "x.npz"],
            "jaxattn capture: error: unknown option --output: did you mean --out? "
            "(see jaxattn capture --help)",
        ),
        # analyze's --out is required: the typo is named, not the missing --out
        (
            ["analyze", "c.txt", "--output", "r.json"],
            "jaxattn analyze: error: unknown option --output: did you mean --out?",
        ),
        (["capture", "hi", "--output=x.npz"], "unknown option --output: did you mean --out?"),
        (["capture", "hi", "--layer", "2"], "unknown option --layer: did you mean --layers?"),
        (
            ["dump", "c.txt", "--out", "s", "--hed", "0"],
            "unknown option --hed: did you mean --heads?",
        ),
        (["capture", "hi", "-o", "x"], "unknown option -o: did you mean --out or --overwrite?"),
        (
            ["capture", "hi", "--limit", "3"],
            "unknown option --limit: capture has no --limit; bench, analyze, dump and view take it",
        ),
        # the 0.2 spellings of view --global's --seed and --quiet
        (
            ["view", "--global", "c.txt", "--out", "q.html", "--global-seed", "1"],
            "unknown option --global-seed: did you mean --seed?",
        ),
        (
            ["view", "--global", "c.txt", "--out", "q.html", "--global-quiet"],
            "unknown option --global-quiet: did you mean --quiet?",
        ),
        (
            ["capture", "hi", "--version"],
            "unknown option --version: the version is jaxattn's: jaxattn --version",
        ),
        (
            ["capture", "hi", "--frobnicate"],
            "jaxattn capture: error: unknown option --frobnicate (see jaxattn capture --help)",
        ),
    ],
)
def test_an_unknown_option_gets_the_nearest_of_that_command(capsys, argv, line):
    assert line in _error(capsys, argv)


def test_no_option_is_taken_by_its_prefix(capsys):
    """`--lay 2` was argparse's --layers 2, silently; now it is a typo with a suggestion."""
    for name, parser in build_parser().commands.items():
        assert parser.allow_abbrev is False, name
    assert "unknown option --lay: did you mean --layers?" in _error(
        capsys, ["capture", "hi", "--lay", "0"]
    )
    assert "unknown option --over: did you mean --overwrite?" in _error(
        capsys, ["view", "hi", "--out", "x.html", "--over"]
    )


def test_an_unknown_command_gets_the_nearest_command(capsys):
    assert _error(capsys, ["captur", "hi"]) == (
        "jaxattn: error: unknown command 'captur': did you mean capture? (see jaxattn --help)"
    )
    assert "did you mean analyze?" in _error(capsys, ["analyse", "c.txt"])
    assert "unknown command 'frob': the commands are demo, serve, capture," in _error(
        capsys, ["frob"]
    )
    assert "give a COMMAND: demo, serve, capture, convert" in _error(capsys, [])


def test_a_bad_choice_or_quantity_gets_the_nearest(capsys):
    line = _error(capsys, ["capture", "hi", "--dtype", "float"])
    assert "invalid choice: 'float' (choose from 'float32', " in line  # argparse's, kept
    assert line.endswith("did you mean 'float32' or 'float16'? (see jaxattn capture --help)")
    assert "argument --what: unknown quantity 'atention': did you mean 'attention'?" in _error(
        capsys, ["capture", "hi", "--what", "attention,atention"]
    )
    assert "unknown quantity 'zzz': valid quantities are attention, scores" in _error(
        capsys, ["dump", "c.txt", "--out", "s", "--what", "zzz"]
    )


def test_words_left_over_say_what_the_command_takes(capsys):
    line = _error(capsys, ["capture", "The", "cat", "sat"])
    assert "unexpected argument 'sat': jaxattn capture takes TEXT [TEXT_B]; put a text " in line
    assert line.endswith("that has spaces in quotes (see jaxattn capture --help)")
    line = _error(capsys, ["analyze", "a.txt", "b.txt", "--out", "r.json"])
    assert "unexpected argument 'b.txt': jaxattn analyze takes INPUT (see" in line


def test_dashes_negative_numbers_and_help_still_work(capsys):
    parse = build_parser().parse_args
    args = parse(["capture", "--what", "attention", "--", "--not-an-option"])
    assert args.text == "--not-an-option"
    args = parse(["capture", "x", "--layers=-2:", "--heads=-3,-1", "--what", "attention"])
    assert args.layers == (slice(-2, None),) and args.heads == (-3, -1)
    args = parse(["analyze", "-", "--out", "r.json", "--baseline-offsets", "-2", "1"])
    assert args.input == "-" and args.baseline_offsets == [-2, 1]
    assert parse(["bench", "-n5"]).n == 5  # a short option with its value
    args = parse(["capture", "-1 is a number, - a dash"])  # a text with spaces is a text
    assert args.text.startswith("-1 is")
    assert main(["capture", "--outptu", "--help"]) == 0  # --help answers first
    assert capsys.readouterr().out.startswith("usage: jaxattn capture")


def test_nearest():
    assert nearest("--output", ["--out", "--overwrite", "--model"]) == ["--out"]
    assert nearest("float", ["float32", "float16", "bfloat16"]) == ["float32", "float16"]
    assert nearest("qqqq", ["attention", "keys"]) == []
    assert nearest("--out", ["--out", "--outs"]) == ["--outs"]  # never the word itself
    assert nearest("--global-seed", ["--global", "--global-reducer", "--seed"]) == ["--seed"]


def test_help_shows_first_steps_that_parse(capsys):
    """`jaxattn --help` ends with commands to type first, kept in lines, each a valid
    command line."""
    import shlex

    from jaxattn.cli import FIRST_STEPS

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith(FIRST_STEPS.rstrip())  # not reflowed
    examples = [line.split("  ")[1] for line in FIRST_STEPS.splitlines() if line[:2] == "  "]
    assert len(examples) == 4
    for example in examples:
        argv = shlex.split(example)
        assert argv[0] == "jaxattn"
        assert build_parser().parse_args(argv[1:]).command == argv[1]
