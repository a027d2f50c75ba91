"""Fixtures of the service tests: one tiny real engine, in-process servers on port 0.

Compiles are the cost here (~2-6 s each on a 2-core CPU), so the engine uses
two buckets (32 and the model's 67) and batches of at most 4 (shapes 1, 2, 4),
every test sentence is under 32 tokens, and tests share a few capture specs
(mostly WHAT in float32 over 4 texts).
"""

from __future__ import annotations

import contextlib
import threading

import pytest
from hf_fixtures import EXAMPLE_A, EXAMPLE_B, make_checkpoint

# Sentences of the tiny WordPiece vocabulary, all under 32 tokens.
SENTENCES = (
    EXAMPLE_A,
    EXAMPLE_B,
    "the quick brown fox jumps over the lazy dog",
    "the cat sat on the mat",
    "hello world",
    "she was a cat and he was a dog",
    "they ran to the store with the dog",
    "this is a short sentence",
    "it was a long test",
    "we bought fresh strawberries at the store",
)
TEXTS = [EXAMPLE_A, (EXAMPLE_A, EXAMPLE_B), "the cat sat on the mat", ("hello world", "")]
WHAT = ("attention", "alpha_fx_norm")  # the spec most tests share


@pytest.fixture(scope="session")
def svc_checkpoint(tmp_path_factory):
    """A tiny random BERT checkpoint (3 layers x 3 heads, D=15, max length 67)."""
    return make_checkpoint("bert", tmp_path_factory.mktemp("svc_bert"))


@pytest.fixture(scope="session")
def svc_engine(svc_checkpoint):
    import jaxattn

    return jaxattn.load(svc_checkpoint, buckets=(32,), max_batch=4)


@contextlib.contextmanager
def running_server(engine, **options):
    """A started in-process server on a free loopback port; yields (server, address)."""
    from service import create_server

    options.setdefault("max_batch_examples", 8)
    options.setdefault("grace_s", 2.0)
    server, port = create_server(engine, "127.0.0.1:0", **options)
    server.start()
    try:
        yield server, f"127.0.0.1:{port}"
    finally:
        server.stop(grace=0.5).wait(10)


@pytest.fixture(scope="session")
def served(svc_engine):
    """(server, address) of a shared server with small request limits."""
    with running_server(svc_engine, max_texts=64, max_tokens=1500) as s:
        yield s


@pytest.fixture(scope="session")
def address(served):
    return served[1]


@pytest.fixture
def client(address):
    from jaxattn.client import AttentionClient

    with AttentionClient(address, timeout=60.0) as c:
        yield c


class GatedEngine:
    """The real engine, but `run` waits for `gate` first; records what ran.

    Lets a test hold a batch "in progress" deterministically, then release it.
    """

    def __init__(self, engine):
        self.engine = engine
        self.info = engine.info
        self.make_spec = engine.make_spec
        self.tokenize = engine.tokenize
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.runs: list[int] = []  # examples per run call
        self.yielded = 0
        self.closed_early = 0

    def run(self, tokenized, spec):
        self.runs.append(len(tokenized))
        self.entered.set()
        assert self.gate.wait(30), "gate never opened"
        done = 0
        try:
            for item in self.engine.run(tokenized, spec):
                self.yielded += 1
                done += 1
                yield item
        finally:
            if done < len(tokenized):
                self.closed_early += 1


@pytest.fixture
def gated(svc_engine):
    return GatedEngine(svc_engine)
