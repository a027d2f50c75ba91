"""`jaxattn capture/view TEXT --generate N` on a tiny random GPT-2: the summary shows the
continuation the engine generates, the saved capture and the page hold the boundary; a
decoder without its head, a prompt + N over the positions, a mode that does not capture
texts: one line each, exit 2. (Encoders, N < 1, --ignore-eos alone: the table of
tests/cli/bad_inputs.py; --server: test_cli_generate_server.py.)"""

from __future__ import annotations

import re

import pytest
from cli_support import one_error
from gpt2_fixture import make_gpt2_checkpoint  # noqa: E402
from llama_fixture import make_llama_checkpoint  # noqa: E402

import jaxattn
from jaxattn.cli import main

PROMPT = "The quick brown fox"


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return make_gpt2_checkpoint(tmp_path_factory.mktemp("gpt2"), n_positions=20)


def test_capture_prints_the_continuation_and_saves_the_boundary(gpt2, tmp_path, capsys):
    out = tmp_path / "g.npz"
    args = ["capture", PROMPT, "--model", str(gpt2), "--generate", "4", "--ignore-eos"]
    assert main([*args, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    (gen,) = jaxattn.load(gpt2).generate([PROMPT], 4, stop_at_eos=False)
    cap = jaxattn.Capture.load(out)
    assert cap.generated_start == gen.prompt.length
    assert cap.tokens == gen.prompt.tokens + gen.tokens
    assert printed.splitlines()[0] == " ".join(cap.tokens)
    assert (
        f"generated 4 token(s) from token {gen.prompt.length}, stopped at max_new_tokens: "
        f"{gen.text!r}" in printed
    )


def test_view_marks_the_continuation_in_the_page(gpt2, tmp_path, capsys):
    out = tmp_path / "v.html"
    args = ["view", PROMPT, "plain text", "--model", str(gpt2), "--generate", "3"]
    assert main([*args, "--ignore-eos", "--views", "head", "--out", str(out)]) == 0
    assert "2 example(s)" in capsys.readouterr().out
    starts = [int(s) for s in re.findall(r'"generated_start":(\d+)', out.read_text())]
    lengths = [e.length for e in jaxattn.load(gpt2).tokenize([PROMPT, "plain text"])]
    assert starts == lengths  # each example's own prompt length


def test_what_cannot_generate_is_one_line_and_exit_2(gpt2, tmp_path, capsys):
    bare = make_llama_checkpoint(tmp_path / "bare", lm_head=False)
    assert main(["capture", PROMPT, "--model", str(bare), "--generate", "2"]) == 2
    assert "bare has no next-token head" in one_error(capsys, "capture")
    limit = jaxattn.load(gpt2).config.max_length
    n = limit  # the prompt's tokens + n: over the model's positions
    assert main(["capture", PROMPT, "--model", str(gpt2), "--generate", str(n)]) == 2
    line = one_error(capsys, "capture")
    assert re.search(
        rf"prompt tokens \+ {n} new tokens = \d+, over the model's limit of {limit}", line
    )
    args = ["view", PROMPT, "--global", "--generate", "2", "--out", str(tmp_path / "x.html")]
    assert main(args) == 2
    assert "not --global" in one_error(capsys, "view")


def test_too_long_truncate_generates_until_the_positions_are_full(gpt2, tmp_path, capsys):
    limit = jaxattn.load(gpt2).config.max_length
    out = tmp_path / "t.npz"
    args = ["capture", PROMPT, "--model", str(gpt2), "--generate", str(limit), "--ignore-eos"]
    assert main([*args, "--too-long", "truncate", "--out", str(out)]) == 0
    assert "stopped at the model's limit of positions" in capsys.readouterr().out
    assert jaxattn.Capture.load(out).length == limit


def test_view_of_saved_captures_only_refuses_what_applies_to_texts(gpt2, tmp_path, capsys):
    saved = tmp_path / "s.npz"
    assert main(["capture", PROMPT, "--model", str(gpt2), "--out", str(saved)]) == 0
    out = str(tmp_path / "v.html")
    for flags in (
        ["--generate", "2"],
        ["--model", str(gpt2)],
        ["--server", "127.0.0.1:9"],
        ["--precision", "bf16"],  # was drawn as saved, the flag silently unused
        ["--attention", "dense"],  # the engine's options too
        ["--attention-block", "64"],
    ):
        capsys.readouterr()
        assert main(["view", str(saved), *flags, "--out", out]) == 2  # was drawn, flag unused
        line = one_error(capsys, "view")
        assert f"{flags[0]} applies to texts to capture" in line
        assert line.endswith(f"drop {flags[0]}")
        # the continuations' note only where it answers the flag
        assert ("dump --generate keeps" in line) == (flags[0] == "--generate"), line
    assert main(["view", str(saved), "--out", out]) == 0
