"""The XLA flags of the test session, for its own backend and the processes it starts.

The suite compiles hundreds of tiny programs and runs each a few times: on the 2-core
test machine most of its time was XLA's CPU compiler, and most of that LLVM's
optimisation (a full capture of a tiny model: ~2 s a program). Tests compile with
LLVM's optimisations off (`--xla_backend_optimization_level=0`): measured on
tests/test_capture_invariants.py + tests/test_long_engine.py, 78 s at the default, 73 s
at level 1, 61 s at level 0, the 4,096-token long test no slower. What is compiled is
the same program (the HLO passes run as always); its float32 results may differ from
the default's in the last bits, so every process a test compares with its own numbers
bit for bit compiles with these flags too (`flags`).
"""

from __future__ import annotations

import os

TEST_FLAGS = ("--xla_backend_optimization_level=0",)


def flags(*extra: str, environ=None) -> str:
    """XLA_FLAGS with the test flags (and `extra`) added to what `environ` (os.environ)
    already has, each flag once."""
    have = (os.environ if environ is None else environ).get("XLA_FLAGS", "").split()
    return " ".join(dict.fromkeys([*have, *TEST_FLAGS, *extra]))
