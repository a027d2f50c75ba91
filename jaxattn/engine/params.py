"""Checking a params tree against the shapes the model expects, and fingerprinting it."""

from __future__ import annotations

import functools
import hashlib
import types
from collections.abc import Callable, Iterable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from jaxattn.config import ModelConfig
from jaxattn.engine.model import Encoder
from jaxattn.errors import CheckpointError
from jaxattn.spec import CaptureSpec


def expected_shapes(config: ModelConfig) -> dict:
    """The encoder params' shapes, from an abstract init (no compute, no memory)."""
    # hidden_states of the last layer: every weight is used.
    spec = CaptureSpec(what=("hidden_states",), layers=(config.num_layers - 1,), heads=(0,))
    ids = jnp.zeros((4,), jnp.int32)
    tree = jax.eval_shape(
        lambda: Encoder(config).init(jax.random.key(0), ids, ids, ids > 0, spec)["params"]
    )
    return jax.tree.map(lambda s: tuple(s.shape), tree)


@functools.lru_cache(maxsize=32)
def _expected(config: ModelConfig) -> Mapping[str, tuple[int, ...]]:
    """path -> shape of `expected_shapes`, traced once per config (a load asks twice:
    the weights' names, then their shapes; a trace costs ~0.15 s)."""
    return types.MappingProxyType(flatten(expected_shapes(config)))


def expected_paths(config: ModelConfig) -> set[str]:
    """The encoder params' paths ("layer_0/attention/query/kernel", ...)."""
    return set(_expected(config))


def check_params(config: ModelConfig, params: dict) -> None:
    """Raise CheckpointError naming the first param whose presence or shape is wrong."""
    want = _expected(config)
    have = {k: tuple(np.shape(v)) for k, v in flatten(params).items()}
    for key in sorted(set(want) | set(have)):
        if key not in have:
            raise CheckpointError(f"the weights lack {key} (expected shape {want[key]})")
        if key not in want:
            raise CheckpointError(
                f"the weights have {key}, which the {config.family} model does not use"
            )
        if have[key] != want[key]:
            raise CheckpointError(
                f"weight {key} has shape {have[key]}, but the config implies {want[key]} "
                "(does config.json belong to these weights?)"
            )


def fingerprint(params: dict) -> str:
    """A fingerprint of a params tree: "blake2b:" + 32 hex digits over every tensor's name,
    dtype, shape and bytes (in name order). Equal weights give equal fingerprints
    whatever the file format they were read from."""
    flat = flatten(params)
    return fingerprint_tensors(flat, flat.__getitem__)


def fingerprint_tensors(names: Iterable[str], tensor: Callable[[str], object]) -> str:
    """`fingerprint` of the tree whose flat names ("layer_0/attention/query/kernel", ...)
    are `names`, each tensor asked of `tensor(name)` when its turn comes (in name order)
    and let go once hashed: a caller that copies each from a device holds one on the
    host at a time (`CaptureStep.canonical_tensors`)."""
    h = hashlib.blake2b(digest_size=16)
    for key in sorted(names):
        a = np.ascontiguousarray(np.asarray(tensor(key)))
        h.update(f"{key}|{a.dtype.str}|{a.shape}\n".encode())
        h.update(memoryview(a).cast("B"))
        del a  # before the next one is asked for
    return "blake2b:" + h.hexdigest()


def flatten(tree, prefix="") -> dict:
    """A params tree as {"a/b/leaf": tensor}, the names `fingerprint` hashes."""
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out |= flatten(v, f"{prefix}{k}/")
        else:
            out[f"{prefix}{k}"] = v
    return out
