"""The attention sink with and without BOS over a corpus (Xiao et al. 2023).

It drives a causal engine (any object with `tokenize`, `make_spec`, `run`,
`config` and `tokenizer`, as `jaxattn.Engine`), without importing the engine:
the analyses stay importable where jax is not.

Each text is captured twice by a causal engine, as [BOS, t_0 .. t_{n-1}] and as
[t_0 .. t_{n-1}], whatever the tokenizer adds by itself: a Llama tokenizer
prepends BOS (it is removed for the second capture), GPT-2's adds none (it is
prepended for the first). The shares per head are
`jaxattn.analysis.decoder.bos_sink_shares`; without BOS the text's tokens sit
one position earlier (learned positions: GPT-2's wpe row 0 is the text's first
token's; RoPE sees only relative offsets), as a model meets a text without BOS.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from jaxattn.analysis.decoder import BosSinks
from jaxattn.errors import CheckpointError, UsageError

CHUNK = 32  # pairs captured per engine call (bounds the maps held)


def _without_first(e):
    return dataclasses.replace(e, ids=e.ids[1:], type_ids=e.type_ids[1:], tokens=e.tokens[1:])


def _with_first(e, bos_id: int, bos: str):
    return dataclasses.replace(
        e, ids=(bos_id, *e.ids), type_ids=(0, *e.type_ids), tokens=(bos, *e.tokens)
    )


def bos_variants(engine, tokenized: Sequence) -> list[tuple]:
    """(with BOS, without BOS) of each example whose text has 2 tokens or more and whose
    BOS version fits the model (others left out).

    Raises:
      UsageError: the model is not causal; CheckpointError: its tokenizer has no BOS
        token.
    """
    if not engine.config.causal:
        raise UsageError(f"{engine.config.name} is not a decoder (causal) model: no BOS sink")
    hf = engine.tokenizer.hf
    bos_id, bos = hf.bos_token_id, hf.bos_token
    if bos_id is None or bos is None:
        raise CheckpointError(f"the tokenizer of {engine.config.name} has no BOS token")
    out = []
    for e in tokenized:
        if e is None:
            continue
        if e.ids and e.ids[0] == bos_id:
            pair = (e, _without_first(e))
        else:
            pair = (_with_first(e, bos_id, bos), e)
        if pair[1].length >= 2 and pair[0].length <= engine.config.max_length:
            out.append(pair)
    return out


def bos_sink_study(engine, texts: Sequence, *, too_long: str = "error") -> dict:
    """The attention sink of every head with and without BOS, over `texts`.

    Returns:
      {"bos_token": BOS, "examples": N used, "skipped": texts left out (fewer than
        two tokens without BOS, or too long with it), and from `BosSinks.result`:
        "bos", "first_after_bos", "first_without_bos", "shift": [L, H] arrays}.
    """
    tokenized = [t for t in engine.tokenize(texts, too_long=too_long) if t is not None]
    pairs = bos_variants(engine, tokenized)
    spec = engine.make_spec("attention")
    sinks = BosSinks()
    for start in range(0, len(pairs), CHUNK):  # at most 2 CHUNK maps held at once
        chunk = pairs[start : start + CHUNK]
        maps = dict(engine.run([e for pair in chunk for e in pair], spec))
        for i in range(len(chunk)):
            sinks.update(maps.pop(2 * i).attention, maps.pop(2 * i + 1).attention)
    return {
        "bos_token": engine.tokenizer.hf.bos_token,
        "examples": sinks.examples,
        "skipped": len(texts) - sinks.examples,
        **sinks.result(),
    }
