"""The XLA flags jaxattn sets by default, and the user's own flags winning."""

from __future__ import annotations

import os
import subprocess
import sys

from jaxattn.engine import xla_flags


def test_defaults_are_appended_unless_the_user_named_the_flag():
    assert xla_flags.with_defaults("") == "--xla_gpu_enable_triton_gemm=false"
    assert xla_flags.with_defaults("--xla_dump_to=/tmp/x") == (
        "--xla_dump_to=/tmp/x --xla_gpu_enable_triton_gemm=false"
    )
    mine = "--xla_gpu_enable_triton_gemm=true --xla_force_host_platform_device_count=2"
    assert xla_flags.with_defaults(mine) == mine
    assert xla_flags.with_defaults("  -xla_gpu_enable_triton_gemm=true ") == (
        "-xla_gpu_enable_triton_gemm=true"
    )


def test_apply_sets_xla_flags_and_can_be_turned_off():
    env = {"XLA_FLAGS": "--xla_dump_to=/tmp/x"}
    assert xla_flags.apply(env) == env["XLA_FLAGS"]
    assert env["XLA_FLAGS"].endswith("--xla_gpu_enable_triton_gemm=false")
    off = {"JAXATTN_XLA_DEFAULTS": "off"}
    assert xla_flags.apply(off) == "" and "XLA_FLAGS" not in off


def test_importing_the_engine_sets_them_before_jax_starts_and_the_cpu_runs():
    code = (
        "import os, jaxattn.engine, jax.numpy as jnp;"
        "print(os.environ['XLA_FLAGS']); print(float(jnp.ones(3).sum()))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", xla_flags.ENV)}
    got = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert got.stdout.split() == ["--xla_gpu_enable_triton_gemm=false", "3.0"]
