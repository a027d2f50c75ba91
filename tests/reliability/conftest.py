"""Fixtures of the reliability tests: one tiny real engine, in-process servers on port 0.

Compiles are the cost (~1-3 s each on a 2-core CPU): the engine has one bucket
(32) and batches of at most 4, every test sentence is under 32 tokens and
nearly every test captures `rel_support.WHAT` in float32.
"""

from __future__ import annotations

import pytest
from hf_fixtures import make_checkpoint
from rel_support import SENTENCES, WHAT, running_server


@pytest.fixture(scope="session")
def rel_checkpoint(tmp_path_factory):
    """A tiny random BERT checkpoint (3 layers x 3 heads, D=15, max length 67)."""
    return make_checkpoint("bert", tmp_path_factory.mktemp("rel_bert"))


@pytest.fixture(scope="session")
def rel_engine(rel_checkpoint):
    import jaxattn

    engine = jaxattn.load(rel_checkpoint, buckets=(32,), max_batch=4)
    engine.warmup(engine.make_spec(what=WHAT))  # batch shapes 4, 2, 1 of bucket 32
    return engine


@pytest.fixture(scope="session")
def expected(rel_engine):
    """sentence -> its right answer under WHAT in float32 (jaxattn.bench.expect).

    Bit-identical to one of the engine's own captures of it: the engine's last
    bits depend on the batch size, and a server batches as requests arrive,
    so one reference is kept per batch size (1, 2, 4).
    """
    from jaxattn.bench.expect import build_expectations
    from jaxattn.bench.load_generator import LoadRequest

    mix = [LoadRequest("single", (s,), WHAT) for s in SENTENCES]
    found = build_expectations(rel_engine, mix, max_batch=4)
    return {s: e for s, (e,) in zip(SENTENCES, found, strict=True)}


@pytest.fixture(scope="module")
def served(rel_engine):
    """(server, address) of a plain server shared by a module's tests."""
    with running_server(rel_engine, max_texts=64, max_tokens=2000) as s:
        yield s
