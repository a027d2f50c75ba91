"""The advice an error gives, in the terms of who reads it: one table
(`jaxattn.errors.ADVICE`), read by the engine's errors, the server's messages, the
Python client and the command line."""

from __future__ import annotations

import pytest

from jaxattn.client.errors import in_terms
from jaxattn.errors import ADVICE, GenerationTooLongError, TooLongError


@pytest.mark.parametrize("advice", ADVICE, ids=["too_long", "generation_too_long"])
def test_each_advice_speaks_its_own_terms(advice):
    assert "CaptureRequest" in advice.wire and "truncate" in advice.wire
    assert "too_long='truncate'" in advice.python and "too_long='skip'" in advice.python
    assert "--too-long truncate" in advice.flags and "--too-long skip" in advice.flags
    assert "CaptureRequest" not in advice.python + advice.flags
    assert "--" not in advice.python and "too_long=" not in advice.flags


def test_a_text_too_long_says_to_cut_or_skip_it():
    error = TooLongError(3, 90, 64)
    assert str(error) == (
        "text 3 is 90 tokens long, over the model's limit of 64 tokens: cut it with "
        "too_long='truncate' or leave it out with too_long='skip'"
    )
    assert error.cli_message().endswith(
        ": cut it with --too-long truncate or leave it out with --too-long skip"
    )


def test_a_prompt_too_long_to_continue_says_to_ask_fewer_tokens():
    error = GenerationTooLongError(0, 12, 60, 64)
    said = str(error)
    assert said.startswith("text 0: its 12 prompt tokens + 60 new tokens = 72, over the ")
    assert "ask for fewer new tokens (generate=)" in said
    assert "generate until the positions are full with too_long='truncate'" in said
    assert "cut it" not in said  # the prompt fits: cutting it is not the remedy
    assert "ask for fewer new tokens (--generate)" in error.cli_message()


@pytest.mark.parametrize("advice", ADVICE, ids=["too_long", "generation_too_long"])
def test_a_servers_advice_is_put_in_the_readers_terms(advice):
    message = f"texts[1] is 82 tokens, over the model's limit of 67: {advice.wire}"
    assert in_terms(message, "python") == message.replace(advice.wire, advice.python)
    assert in_terms(message, "flags") == message.replace(advice.wire, advice.flags)
    assert in_terms("texts[0] is empty", "flags") == "texts[0] is empty"
