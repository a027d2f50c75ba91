"""Shared helpers of the dump tests: the corpus, the reference command, comparisons.

Every text of the corpus is at most 8 tokens long (one length bucket) and the
shards hold 4 records, so a whole session compiles very few batch shapes: each
costs seconds on the 2-core machine.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import xla_env

from jaxattn.dump import DumpOptions

WHAT = ("attention", "fx_norm", "hidden_states")
SHARD_SIZE = 4
JAXATTN = Path(sys.executable).with_name("jaxattn")  # the venv's console script

# 8 records, 2 shards of 4; <= 8 tokens each with the tiny BERT vocabulary.
CORPUS = [
    {"text": "i went to the store .", "id": "a1"},
    {"text": "the cat sat on the mat", "id": "a2"},
    {"text": "he ran", "text_b": "she sat", "id": "pair"},
    {"text": "a quick brown fox", "id": 7},
    {"text": "hello world"},
    {"text": "they bought fresh strawberries"},
    {"text": "the dog was lazy", "id": "b3"},
    {"text": "it is a test", "id": "b4"},
]


def texts_of(records: list[dict]) -> list:
    """The engine texts of JSONL records (pairs as tuples)."""
    return [(r["text"], r["text_b"]) if "text_b" in r else r["text"] for r in records]


def write_jsonl(path: Path, records: list) -> Path:
    """One JSON object per line; str entries are written as they are (bad lines)."""
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def options(corpus: Path, out, **overrides) -> DumpOptions:
    """The reference command's options, with overrides."""
    base = dict(input=corpus, out=str(out), what=WHAT, shard_size=SHARD_SIZE, quiet=True)
    return DumpOptions(**{**base, **overrides})


def assert_same_store(got, want, *, exact: bool = True) -> None:
    """Two opened stores hold the same examples: manifest entries and tensors.

    exact: bit-equal tensors; otherwise within 1e-6 (different batch shapes).
    """
    assert len(got) == len(want)
    assert got.metadata["spec"] == want.metadata["spec"]
    assert got.metadata.get("generate") == want.metadata.get("generate")
    for a, b in zip(got.entries, want.entries, strict=True):
        assert (a.record, a.line, a.id, a.tokens, a.sentence_b_start, a.truncated) == (
            b.record,
            b.line,
            b.id,
            b.tokens,
            b.sentence_b_start,
            b.truncated,
        )
        assert a.generated_start == b.generated_start
    for x, y in zip(got, want, strict=True):
        assert_same_capture(x, y, exact=exact)


def assert_same_capture(got, want, *, exact: bool = True) -> None:
    """The same tokens, spec, quantisation and tensors (bit-equal, or within float32 rounding).

    Not exact: batches of another shape (4 rows over 4 devices vs 4 rows on one)
    run other XLA kernels, whose float32 sums differ in the last bits (seen: 3.6e-6
    relative, 1.4e-6 absolute, on an AMD EPYC); 1e-5 still catches any real difference.
    """
    assert got.tokens == want.tokens
    assert got.sentence_b_start == want.sentence_b_start
    assert got.generated_start == want.generated_start
    assert (got.layers, got.heads, got.dtype) == (want.layers, want.heads, want.dtype)
    assert got.what == want.what
    for name in want.what:
        a, b = got.tensors[name], want.tensors[name]
        assert a.dtype == b.dtype and a.shape == b.shape, name
        if exact:
            np.testing.assert_array_equal(a, b, err_msg=name)
        else:
            np.testing.assert_allclose(
                got.array(name), want.array(name), rtol=1e-5, atol=1e-5, err_msg=name
            )
    if exact:
        assert got.quantization == want.quantization


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli_env(compile_cache: Path, devices: int = 1, **extra: str) -> dict:
    """Environment of a `jaxattn dump` subprocess: CPU, hermetic, shared compile cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_"))}
    env.update(
        JAX_PLATFORMS="cpu",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        JAXATTN_COMPILATION_CACHE=str(compile_cache),
    )
    # the session's flags (`xla_env`): the reference store is captured in the session
    more = [f"--xla_force_host_platform_device_count={devices}"] if devices > 1 else []
    env["XLA_FLAGS"] = xla_env.flags(*more, environ={})
    env.update(extra)
    return env


def dump_cli(corpus: Path, out, checkpoint: Path, *flags: str) -> list[str]:
    """The `jaxattn dump` command line of the reference command."""
    return [
        str(JAXATTN),
        "dump",
        str(corpus),
        "--out",
        str(out),
        "--model",
        str(checkpoint),
        "--what",
        ",".join(WHAT),
        "--shard-size",
        str(SHARD_SIZE),
        *flags,
    ]


def run_cli(cmd: list[str], env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
