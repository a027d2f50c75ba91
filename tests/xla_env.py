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
import subprocess
import sys

# XLA aborts every process on a flag it does not know, and the classic emitters are on
# their way out of XLA (jax is not pinned): a flag of `OPTIONAL` is used only where a
# child process starts JAX's CPU backend with it (once a session: the answer travels to
# the workers and the processes the tests start in `KNOWN`).
REQUIRED = ("--xla_backend_optimization_level=0",)  # LLVM's optimisations off
OPTIONAL = ("--xla_cpu_use_fusion_emitters=false",)  # the classic emitters: half the compile
KNOWN = "JAXATTN_TEST_XLA_FLAGS"


def _known(flags: tuple[str, ...]) -> bool:
    probe = "import jax; jax.devices()"
    env = {**os.environ, "XLA_FLAGS": " ".join(flags), "JAX_PLATFORMS": "cpu"}
    got = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, timeout=120)
    return got.returncode == 0


def _test_flags() -> tuple[str, ...]:
    if KNOWN not in os.environ:
        chosen = REQUIRED + (OPTIONAL if _known(REQUIRED + OPTIONAL) else ())
        os.environ[KNOWN] = " ".join(chosen)
    return tuple(os.environ[KNOWN].split())


TEST_FLAGS = _test_flags()


def flags(*extra: str, environ=None) -> str:
    """XLA_FLAGS with the test flags (and `extra`) added to what `environ` (os.environ)
    already has, each flag once."""
    have = (os.environ if environ is None else environ).get("XLA_FLAGS", "").split()
    return " ".join(dict.fromkeys([*have, *TEST_FLAGS, *extra]))
