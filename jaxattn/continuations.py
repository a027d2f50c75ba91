"""What a request for a decoder's continuation is and how one ends, without jax: the
checks and words the local engine (`jaxattn.engine.generate`), the client
(`AttentionClient.capture(..., generate=N)`) and the CLI share."""

from __future__ import annotations

import numpy as np

from jaxattn.errors import UsageError

# Why a continuation ended, and in words: an EOS token (`Engine.eos_ids`: the checkpoint's
# generation config, as transformers' generate; generated, kept as its last token),
# max_new_tokens reached, or the model's positions filled (too_long="truncate").
STOPS = {
    "eos": "at an end-of-sequence token",
    "max_new_tokens": "at max_new_tokens",
    "limit": "at the model's limit of positions",
}


def check_stop_at_eos(stop_at_eos) -> bool:
    """stop_at_eos as a bool (UsageError naming the value otherwise: a truthy string such
    as "no" must not read as True)."""
    if not isinstance(stop_at_eos, bool | np.bool_):
        raise UsageError(f"stop_at_eos must be True or False, got {stop_at_eos!r}")
    return bool(stop_at_eos)


def check_generation(generate, stop_at_eos) -> tuple[int | None, bool]:
    """A capture's (generate, stop_at_eos) checked, as the engine and the client both take
    them: N an int >= 1 or None, stop_at_eos a bool, and False only with N (UsageError)."""
    stop = check_stop_at_eos(stop_at_eos)
    if generate is None:
        if not stop:
            raise UsageError("stop_at_eos=False applies to generate: give generate=N too")
        return None, stop
    return check_new_tokens(generate, "generate"), stop


def check_new_tokens(max_new_tokens, name: str = "max_new_tokens") -> int:
    """max_new_tokens (a capture's `generate`: name it so) as an int >= 1 (UsageError naming
    the argument and the value otherwise): the local engine's check and the client's,
    before a request is sent."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int | np.integer):
        raise UsageError(f"{name} must be a whole number, got {max_new_tokens!r}")
    if max_new_tokens < 1:
        raise UsageError(f"{name} must be at least 1, got {max_new_tokens}")
    return int(max_new_tokens)
