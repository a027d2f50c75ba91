"""What the service tests share besides fixtures (tests/service/conftest.py): the test
sentences, the spec most tests ask for, an in-process server on port 0 and an engine
held at a gate. A module of its own name, not `conftest`: several test folders have a
conftest, and `from conftest import` would find whichever was imported first.
"""

from __future__ import annotations

import threading

from hf_fixtures import EXAMPLE_A, EXAMPLE_B
from local_server import running_server  # noqa: F401  (the tests import it from here)

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
GENERATE_LIMIT = 9  # --max-new-tokens of the generation tests' server (conftest: gpt2_address)


def assert_same_captures(got, want) -> None:
    """Captures through a server equal the local engine's: tokens, text, where the
    continuation starts and why it ended, truncated, and every tensor within float32
    rounding."""
    import numpy as np

    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.tokens == w.tokens and g.text == w.text
        assert g.generated_start == w.generated_start and g.stop == w.stop
        assert g.truncated == w.truncated
        assert sorted(g.tensors) == sorted(w.tensors)
        for name, t in w.tensors.items():
            np.testing.assert_allclose(g.tensors[name], t, rtol=1e-6, atol=1e-7)


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
