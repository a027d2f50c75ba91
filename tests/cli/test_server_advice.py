"""A server's advice on a text too long, in the terms of who reads it: the Python
client's arguments (too_long=) in str(error), the flags (--too-long) on the command
line; `.message` keeps the server's own words (CaptureRequest.truncate)."""

from __future__ import annotations

import pytest
from cli_support import one_error
from local_server import running_server

import jaxattn
from jaxattn.cli import main

LONG = " ".join(["store"] * 80)  # 82 tokens, over the tiny BERT's 67


@pytest.fixture(scope="module")
def server(engines):
    with running_server(engines["bert"]) as (_, address):
        yield address


def test_the_python_client_names_its_own_arguments(server):
    from jaxattn.client import AttentionClient

    with AttentionClient(server) as client, pytest.raises(jaxattn.ServerError) as caught:
        client.capture(["a store", LONG])
    error = caught.value
    assert error.field == "texts[1]"
    assert "set truncate in CaptureRequest" in error.message  # the wire's words, kept
    said = str(error)
    assert "too_long='truncate'" in said and "too_long='skip'" in said
    assert "CaptureRequest" not in said


def test_the_command_line_names_its_flags(server, capsys):
    assert main(["capture", LONG, "--server", server]) == 1
    line = one_error(capsys, "capture")
    assert "texts[0] is 82 tokens" in line
    assert "--too-long truncate" in line and "--too-long skip" in line
    assert "CaptureRequest" not in line and "too_long=" not in line
