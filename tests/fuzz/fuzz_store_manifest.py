"""A store's metadata and manifest parts as `open_store` reads them: the root zarr.json
(`jaxattn.store.metadata.read`, `model_info`, the kv_heads check) and a manifest part
(`ShardPart.from_json`). An input is the root document, a line ``--manifest--``, then
the manifest part of shard 0. An opened store's entries must be usable: tokens
strings, data offsets and shapes whole numbers.
"""

from __future__ import annotations

import json
import shutil
import types

from harness import workdir

from jaxattn.errors import CaptureFileError
from jaxattn.store import layout, metadata, open_store
from jaxattn.store.manifest import Entry, ShardPart

DESIGNED = (CaptureFileError,)
SEPARATOR = b"\n--manifest--\n"
TOKENS = (b'"attributes"', b'"jaxattn"', b'"format_version"', b'"spec"', b'"examples"', b"[[[")
TOKENS += (b'"data"', b'"offset"', b'"shape"', b'"kv_heads"', b"null", b"-1", b"{}", b"[]")
TOKENS += (SEPARATOR,)


def seeds() -> list[bytes]:
    spec = types.SimpleNamespace(
        what=("attention", "fx_norm"),
        layers=(0, 1),
        heads=(0, 2),
        kv_heads=(),
        kv_axis=(0, 2),
        dtype="uint8",
        precision="highest",
    )  # the fields metadata.build reads of a CaptureSpec
    sizes = {"layers": 3, "heads": 3, "hidden": 15, "head_dim": 5, "vocab": 50}
    info = {"name": "tiny", "family": "bert", "max_positions": 67, "weights": "w", **sizes}
    meta = metadata.build(
        model_info=info,
        model_fingerprint="f",
        spec=spec,
        model_config={"hidden_size": 15},
        input_info=metadata.InputInfo(
            name="in.txt", format="text", sha256="0", size=3, records=2, reader="jaxattn.inputs/2"
        ),
        shard_size=2,
        too_long="truncate",
    )
    entries = [
        Entry(
            record=i,
            line=i + 1,
            id=str(i),
            tokens=("[CLS]", "a", "[SEP]"),
            sentence_b_start=None,
            text="a",
            quantization={"attention": (1 / 255, 0.0)},
            data={"attention": (i * 18, (2, 2, 3, 3)), "fx_norm": (i * 12, (2, 2, 3))},
        )
        for i in range(2)
    ]
    part = ShardPart(shard=0, records=(0, 2), examples=tuple(entries), sizes={"attention": 36})
    root = layout.group_metadata({"jaxattn": meta})
    manifest = layout.group_metadata({layout.MANIFEST_ATTRIBUTE: part.to_json()})
    return [json.dumps(root).encode() + SEPARATOR + json.dumps(manifest).encode()]


def one_input(data: bytes) -> None:
    root, _, manifest = data.partition(SEPARATOR)
    folder = workdir() / "store"
    shutil.rmtree(folder, ignore_errors=True)
    (folder / layout.manifest_key(0)).parent.mkdir(parents=True)
    (folder / "zarr.json").write_bytes(root)
    (folder / layout.manifest_key(0)).write_bytes(manifest)
    store = open_store(folder, partial=True)
    assert all(isinstance(q, str) for q in store.what) and isinstance(store.dtype, str)
    for entry in store.entries:
        assert all(isinstance(t, str) for t in entry.tokens), entry
        for offset, shape in entry.data.values():
            assert all(type(n) is int and n >= 0 for n in (offset, *shape)), entry
