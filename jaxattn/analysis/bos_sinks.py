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
from jaxattn.errors import CheckpointError, InputError, UsageError
from jaxattn.stream import shifted

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


def bos_sink_study(
    engine, texts: Sequence, *, too_long: str = "error", limit: int | None = None
) -> dict:
    """The attention sink of every head with and without BOS, over `texts`.

    Args:
      limit: use the first `limit` texts the study can use (texts left out do not
        count towards it, so `examples` is `limit` where the input has that many);
        None: all.

    Returns:
      {"bos_token": BOS, "examples": N used, "skipped": texts read but left out (fewer
        than two tokens without BOS, or too long with it), and from `BosSinks.result`:
        "bos", "first_after_bos", "first_without_bos", "shift": [L, H] arrays}.
    """
    spec = engine.make_spec("attention")
    sinks = BosSinks()
    read = 0
    while read < len(texts) and (limit is None or sinks.examples < limit):
        # tokenize about what is still wanted, then capture at most CHUNK pairs at once
        # (2 CHUNK maps held)
        want = CHUNK if limit is None else min(CHUNK, limit - sinks.examples)
        batch = texts[read : read + want]
        read += len(batch)
        try:
            tokenized = [t for t in engine.tokenize(batch, too_long=too_long) if t is not None]
        except InputError as e:  # name the text by its place in `texts`
            raise shifted(e, read - len(batch)) from None
        pairs = bos_variants(engine, tokenized)
        if pairs:
            maps = dict(engine.run([e for pair in pairs for e in pair], spec))
            for i in range(len(pairs)):
                sinks.update(maps.pop(2 * i).attention, maps.pop(2 * i + 1).attention)
    return {
        "bos_token": engine.tokenizer.hf.bos_token,
        "examples": sinks.examples,
        "skipped": read - sinks.examples,
        **sinks.result(),
    }
