"""The XLA flags jaxattn sets by default, before JAX starts a backend.

    --xla_gpu_enable_triton_gemm=false    GEMMs go to cuBLAS, not Triton

Measured on an H200 (BENCHMARKS.md, 2026-11-26): one BERT-base capture shape
compiles in 5.5 s instead of 16.1 s (most of the difference is the autotuning
of Triton GEMM configurations) and runs at 1,321 seq/s instead of 1,337 (1%
slower, within run-to-run noise); `Engine.warmup` of attention, 18 shapes,
took 13.2 s with the flag where without it 16 shapes had not finished in 120 s.
The flag only reaches GPU compiles; the CPU backend ignores it.

A flag named in the user's own XLA_FLAGS wins; ``JAXATTN_XLA_DEFAULTS=off``
leaves XLA_FLAGS alone. They are set when `jaxattn.engine` is first imported:
XLA reads XLA_FLAGS once, when its first backend starts, so a program that
already ran JAX computations before importing jaxattn keeps the flags it had.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping

DEFAULTS: Mapping[str, str] = {"xla_gpu_enable_triton_gemm": "false"}
ENV = "JAXATTN_XLA_DEFAULTS"
_OFF = ("0", "off", "false", "no")


def with_defaults(xla_flags: str, defaults: Mapping[str, str] = DEFAULTS) -> str:
    """`xla_flags` with each default appended unless a flag of that name is there."""
    named = {flag.lstrip("-").split("=", 1)[0] for flag in xla_flags.split()}
    extra = [f"--{name}={value}" for name, value in defaults.items() if name not in named]
    return " ".join([*xla_flags.split(), *extra])


def apply(environ: MutableMapping[str, str] = os.environ) -> str:
    """Set the defaults into XLA_FLAGS (unless JAXATTN_XLA_DEFAULTS turns them off);
    returns XLA_FLAGS as it then is."""
    flags = environ.get("XLA_FLAGS", "")
    if environ.get(ENV, "").strip().lower() not in _OFF:
        flags = with_defaults(flags)
        if flags:
            environ["XLA_FLAGS"] = flags
    return flags
