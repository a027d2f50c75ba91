"""`jaxattn capture/view TEXT --generate N --server ADDRESS`: the server continues the
text (CaptureRequest.generate) and the command prints and saves what the local engine
would; a server that does not generate (an encoder, one that predates the field) or
whose limit is lower: one line, exit 2, before any capture."""

from __future__ import annotations

import re

import numpy as np
import pytest
from cli_support import one_error
from gpt2_fixture import make_gpt2_checkpoint  # noqa: E402
from local_server import fake_service, running_server

import jaxattn
from jaxattn.cli import main
from jaxattn.v1 import attention_pb2 as pb

PROMPT = "The quick brown fox"


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    path = make_gpt2_checkpoint(tmp_path_factory.mktemp("gpt2"), n_positions=20)
    return path, jaxattn.load(path, buckets=(32,))


@pytest.fixture(scope="module")
def server(gpt2):
    with running_server(gpt2[1], max_new_tokens=6) as (_, address):
        yield address


def test_capture_through_the_server_is_the_local_engines(gpt2, server, tmp_path, capsys):
    path, engine = gpt2
    out = tmp_path / "g.npz"
    args = ["capture", PROMPT, "--server", server, "--generate", "4", "--ignore-eos"]
    assert main([*args, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    (gen,) = engine.generate([PROMPT], 4, stop_at_eos=False)
    cap = jaxattn.Capture.load(out)
    assert cap.generated_start == gen.prompt.length
    assert cap.tokens == gen.prompt.tokens + gen.tokens
    (want,) = engine.capture([PROMPT], generate=4, stop_at_eos=False)
    np.testing.assert_allclose(cap.attention, want.attention, atol=1e-6)
    line = (
        f"generated 4 token(s) from token {gen.prompt.length}, stopped at max_new_tokens: "
        f"{' '.join(gen.tokens)}"
    )
    assert line in printed.splitlines()


def test_too_long_truncate_through_the_server_stops_at_the_positions(gpt2, server, capsys):
    path, engine = gpt2
    limit = engine.config.max_length
    n = engine.tokenize([PROMPT])[0].length
    new = limit - n + 1  # one more than the positions leave
    assert new <= 6
    args = ["capture", PROMPT, "--server", server, "--generate", str(new), "--ignore-eos"]
    assert main([*args, "--too-long", "truncate"]) == 0
    assert f"generated {limit - n} token(s)" in capsys.readouterr().out
    # the server's refusal (INVALID_ARGUMENT) exits 2 as the local engine's
    # GenerationTooLongError does: the number asked for is what does not fit
    assert main(args) == 2
    line = one_error(capsys, "capture")
    assert re.search(rf"texts\[0\]: its {n} prompt tokens \+ generate {new} new tokens", line)
    # the server's advice in the command line's terms, not the wire's
    assert "CaptureRequest" not in line and "with --too-long truncate" in line
    assert "--too-long skip" in line
    local = ["capture", PROMPT, "--model", str(path), "--generate", str(new), "--ignore-eos"]
    assert main(local) == 2
    assert f"text 0: its {n} prompt tokens + {new} new tokens" in one_error(capsys, "capture")


def test_a_prompt_skipped_for_its_new_tokens_says_so(gpt2, server, capsys):
    path, engine = gpt2
    n = engine.tokenize([PROMPT])[0].length
    new = engine.config.max_length - n + 1  # the prompt fits; prompt + new does not
    args = ["capture", PROMPT, "--server", server, "--generate", str(new), "--too-long", "skip"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert f"skipped: its tokens + {new} new tokens (--generate) exceed" in printed
    assert "the text is longer" not in printed


def test_view_through_the_server_marks_each_continuation(server, gpt2, tmp_path, capsys):
    out = tmp_path / "v.html"
    args = ["view", PROMPT, "plain text", "--server", server, "--generate", "3"]
    assert main([*args, "--ignore-eos", "--views", "head", "--out", str(out)]) == 0
    assert "2 example(s)" in capsys.readouterr().out
    starts = [int(s) for s in re.findall(r'"generated_start":(\d+)', out.read_text())]
    assert starts == [e.length for e in gpt2[1].tokenize([PROMPT, "plain text"])]


def test_a_server_that_cannot_or_will_not_generate_is_one_line(server, capsys):
    assert main(["capture", PROMPT, "--server", server, "--generate", "7"]) == 2
    assert "generates at most 6 new tokens" in one_error(capsys, "capture")
    asked = []

    def capture(request, context):  # never reached: refused from the ModelInfo
        asked.append(request)
        return iter(())

    def info(request, context):  # a server that predates generation
        return pb.ModelInfo(name="old", family="bert", layers=1, heads=1, max_positions=64)

    with fake_service(capture, info) as old:
        assert main(["capture", PROMPT, "--server", old, "--generate", "2"]) == 2
    assert "does not generate" in one_error(capsys, "capture") and not asked
