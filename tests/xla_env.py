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

The fusions are emitted by XLA's classic elemental IR emitters rather than its newer
MLIR fusion emitters (`--xla_cpu_use_fusion_emitters=false`), which cost far more to
compile at this size: the same program handed to XLA, machine code from another of its
CPU code generators (float32 results alike, again up to the last bits), about half the
compile time. Measured
(CPU seconds of one process, 2-core machine): tests/test_blockwise_engine.py 100 -> 60,
tests/test_layer_groups.py 63 -> 32, tests/test_capture_invariants.py 57 -> 35,
tests/test_parity.py 49 -> 34, tests/test_long_engine.py (the 4,096-token captures)
40 -> 35.
"""

from __future__ import annotations

import os

TEST_FLAGS = (
    "--xla_backend_optimization_level=0",  # LLVM's optimisations off
    "--xla_cpu_use_fusion_emitters=false",  # the classic emitters: half the compile
)


def flags(*extra: str, environ=None) -> str:
    """XLA_FLAGS with the test flags (and `extra`) added to what `environ` (os.environ)
    already has, each flag once."""
    have = (os.environ if environ is None else environ).get("XLA_FLAGS", "").split()
    return " ".join(dict.fromkeys([*have, *TEST_FLAGS, *extra]))
