"""`--help` tells a decoder's user what they get: `analyze` names the decoder analyses
(sinks, induction, copying, the causal LM loss) and what --stats-only keeps of them;
--generate says it runs on a server too where the command has --server (capture and
view do; docs/cli.md#generated-tokens)."""

from __future__ import annotations

import re

import pytest

from jaxattn.cli import main


def help_text(capsys, *command: str) -> str:
    assert main([*command, "--help"]) == 0
    return re.sub(r"\s+", " ", capsys.readouterr().out)


def test_analyze_help_names_the_decoder_analyses(capsys):
    text = help_text(capsys, "analyze")
    for needle in ("on a decoder", "attention sinks", "induction", "OV copying", "causal LM loss"):
        assert needle in text, needle
    assert "a decoder's: the first-token, previous-token" in text  # --stats-only
    assert "sinks, induction, copying heads" in help_text(capsys)  # the command list


@pytest.mark.parametrize("command", ["capture", "view", "dump"])
def test_generate_help_says_where_it_runs(capsys, command):
    text = help_text(capsys, command)
    assert "(local engine)" not in text
    assert "the local model's, or --server's where the command has --server" in text
