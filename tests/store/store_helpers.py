"""A store written without an engine: random captures through the store's own writer.

The store tests check reading (sequence semantics, provenance, errors) against
the very captures written, so they need neither jax nor a model: numpy arrays
of the right shapes go through `jaxattn.store.writer.ShardWriter` exactly as a
dump's captures do.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from jaxattn.capture import Capture
from jaxattn.config import tiny
from jaxattn.info import ModelInfo
from jaxattn.spec import CaptureSpec
from jaxattn.store import layout
from jaxattn.store import metadata as store_metadata
from jaxattn.store.kvstore import KeyValue, root_spec
from jaxattn.store.writer import ShardWriter

WHAT = ("attention", "hidden_states")
CONFIG = tiny()  # 3 layers x 3 heads, D=15
INFO = ModelInfo.of(CONFIG, weights="blake2b:0123456789abcdef")
SPEC = CaptureSpec(what=WHAT, layers=(0, 1, 2), heads=(0, 1, 2))
SIZES = layout.axis_sizes(layers=3, heads=3, head_dim=CONFIG.head_dim, hidden=CONFIG.hidden_size)


def captures(count: int, seed: int = 0) -> list[Capture]:
    """`count` random captures of 3..8 tokens (a new length per example)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        length = 3 + i % 6
        tensors = {
            q: rng.standard_normal(layout.example_shape(q, SIZES, length)).astype(np.float32)
            for q in WHAT
        }
        tokens = ("[CLS]", *(f"w{i}_{j}" for j in range(length - 2)), "[SEP]")
        words = " ".join(tokens[1:-1])
        out.append(
            Capture(
                tokens=tokens,
                sentence_b_start=None,
                layers=SPEC.layers,
                heads=SPEC.heads,
                dtype="float32",
                tensors=tensors,
                text=(words, "b") if i % 3 == 2 else words,  # every third a pair
            )
        )
    return out


def write_store(
    path: Path,
    caps: list[Capture],
    *,
    shard_size: int = 2,
    truncated: frozenset[int] = frozenset(),
    commit: int | None = None,
) -> dict:
    """Write `caps` as a finished store (or only its first `commit` shards); its metadata."""
    from jaxattn.store.metadata import InputInfo

    info = InputInfo(
        name="in.txt",
        format="text",
        sha256="0" * 64,
        size=1,
        records=len(caps),
        reader="jaxattn.inputs/2",
    )
    kv = KeyValue(root_spec(path))
    meta = store_metadata.build(
        model_info=dataclasses.asdict(INFO),
        model_fingerprint="sha256:test",
        spec=SPEC,
        model_config=CONFIG.to_dict(),
        input_info=info,
        shard_size=shard_size,
        too_long="error",
    )
    store_metadata.create_or_check(kv, meta)
    shards = range(-(-len(caps) // shard_size))
    for k in shards[:commit]:
        records = range(k * shard_size, min((k + 1) * shard_size, len(caps)))
        writer = ShardWriter(kv, meta, k, [caps[r].length for r in records])
        for r in records:
            writer.add(
                caps[r],
                record=r,
                line=r + 1,
                id=str(r),
                truncated=r in truncated,
                text=caps[r].text,
            )
        writer.commit((records.start, records.stop), (), {})
    return meta
