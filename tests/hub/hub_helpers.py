"""Helpers of the Hub tests: the tiny model's files, sharding them, an unreachable
endpoint, and `resolve`, which downloads in a process of its own (`driver.py`)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("driver.py")
NEEDED = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
)


def checkpoint_files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in path.iterdir() if p.is_file()}


def sharded(files: dict[str, bytes], parts: int = 2) -> dict[str, bytes]:
    """`files` with model.safetensors split into `parts` shards and their index."""
    state = load_weights(files.pop("model.safetensors"))
    names = [f"model-{i + 1:05d}-of-{parts:05d}.safetensors" for i in range(parts)]
    shards: list[dict] = [{} for _ in names]
    weight_map = {}
    for i, key in enumerate(sorted(state)):
        shards[i % parts][key] = state[key]
        weight_map[key] = names[i % parts]
    files |= {name: save(shard) for name, shard in zip(names, shards, strict=True)}
    index = {
        "metadata": {"total_size": sum(a.nbytes for a in state.values())},
        "weight_map": weight_map,
    }
    files["model.safetensors.index.json"] = json.dumps(index).encode()
    return files


def load_weights(data: bytes) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file's bytes."""
    with tempfile.NamedTemporaryFile(suffix=".safetensors") as f:
        f.write(data)
        f.flush()
        return load_file(f.name)


def closed_endpoint() -> str:
    """An HTTP endpoint nothing listens on: the Hub, unreachable."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def resolve(env: dict[str, str], model: str, **options) -> dict:
    """Resolve `model` in a fresh process with `env` (`driver.py`): its JSON answer."""
    args = json.dumps({"model": model, **options})
    r = subprocess.run(
        [sys.executable, str(DRIVER), args], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])
