"""--attention auto|dense|blockwise and --attention-block N
(`jaxattn.cli.args.add_source_arguments`): every command that loads an engine hands them to
`jaxattn.load`; without them the engine's defaults stand; with --server they are refused.
`jaxattn.load` is stood in: it records its options and stops the command, so no model
loads."""

from __future__ import annotations

import pytest

import jaxattn
from jaxattn.cli import main
from jaxattn.cli.args import ATTENTION


class Loaded(Exception):
    pass


@pytest.fixture
def loads(monkeypatch):
    seen = []

    def load(model=None, **options):
        seen.append(options)
        raise Loaded

    monkeypatch.setattr(jaxattn, "load", load)
    monkeypatch.setenv("JAXATTN_TRACEBACK", "1")  # the stand-in's exception comes through
    return seen


def test_the_flag_names_the_engine_policies():
    from jaxattn.engine import blockwise

    assert ATTENTION == blockwise.POLICIES


def test_the_help_gives_auto_s_thresholds():
    """--attention's help says where "auto" goes blockwise: the engine's constants."""
    import argparse

    from jaxattn.cli.args import add_source_arguments
    from jaxattn.engine import blockwise

    p = argparse.ArgumentParser()
    add_source_arguments(p)
    (action,) = [a for a in p._actions if "--attention" in a.option_strings]
    lengths = f"from {blockwise.AUTO_MIN_LENGTH} tokens with a map, "
    assert lengths + f"{blockwise.AUTO_MIN_LENGTH_STATS} for statistics alone" in action.help
    (block,) = [a for a in p._actions if "--attention-block" in a.option_strings]
    assert f"(default {blockwise.BLOCK}, measured on the CPU;" in block.help


@pytest.mark.parametrize(
    "command",
    [
        ["capture", "a text"],
        ["analyze", "INPUT", "--out", "OUT/report.json"],
        ["dump", "INPUT", "--out", "OUT/store"],
        ["serve", "--port", "0"],
        ["bench", "-n", "2"],
        ["demo"],
        ["web", "--port", "0"],
        ["view", "a text", "--out", "OUT/view.html"],
        ["view", "a text", "--compare", "default", "default,precision=bf16", "--out", "OUT/c.html"],
    ],
    ids=["capture", "analyze", "dump", "serve", "bench", "demo", "web", "view", "view-compare"],
)
def test_the_attention_flag_reaches_the_engine(command, loads, tmp_path):
    (tmp_path / "in.txt").write_text("one text\n")
    command = [
        str(tmp_path / "in.txt") if a == "INPUT" else a.replace("OUT", str(tmp_path))
        for a in command
    ]
    with pytest.raises(Loaded):
        main([*command, "--attention", "blockwise"])
    assert loads[-1].get("attention") == "blockwise"
    with pytest.raises(Loaded):
        main(command)
    assert loads[-1].get("attention", "auto") == "auto"  # the engine's default
    assert loads[-1].get("attention_block") is None
    with pytest.raises(Loaded):
        main([*command, "--attention", "blockwise", "--attention-block", "1024"])
    assert loads[-1].get("attention_block") == 1024
    with pytest.raises(Loaded):
        main([*command, "--attention-block", "7"])
    assert loads[-1].get("attention_block") == 7 and loads[-1].get("attention", "auto") == "auto"


@pytest.mark.parametrize(
    "value, why",
    [
        ("0", "expected a number >= 1, got 0"),
        ("-4", "expected a number >= 1, got -4"),
        ("1.5", "expected a whole number, got '1.5'"),
        ("big", "expected a whole number, got 'big'"),
    ],
)
def test_a_bad_attention_block_is_refused_by_the_flag(value, why, loads, capsys):
    assert main(["capture", "a text", f"--attention-block={value}"]) == 2
    assert f"argument --attention-block: {why}" in capsys.readouterr().err
    assert loads == []  # refused before anything loads


def test_attention_with_a_server_is_refused(capsys):
    code = main(["capture", "a text", "--server", "127.0.0.1:1", "--attention", "dense"])
    assert code == 2
    assert "--attention sets how a local engine runs" in capsys.readouterr().err
    code = main(["capture", "a text", "--server", "127.0.0.1:1", "--attention-block", "512"])
    assert code == 2
    assert "--attention-block sets how a local engine runs" in capsys.readouterr().err
