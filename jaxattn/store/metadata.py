"""Store metadata: what a store holds and the command that wrote it.

The metadata lives in the root group's zarr.json (``attributes["jaxattn"]``).
Its *identity* fields (model fingerprint, spec, input fingerprint, sharding,
too-long policy, array encoding) decide whether a dump command may continue an
existing store: a resumed job must produce exactly what the first one would
have, so any difference is refused, naming each field that differs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from jaxattn.quantities import QUANTITIES
from jaxattn.store import layout
from jaxattn.store.kvstore import KeyValue

# (section, field) pairs compared on resume, with a human name for the message.
_IDENTITY = (
    (("format_version",), "store format version"),
    (("model", "fingerprint"), "model (checkpoint fingerprint)"),
    (("model", "name"), "model name"),
    (("spec", "what"), "quantities (--what)"),
    (("spec", "layers"), "layers (--layers)"),
    (("spec", "heads"), "heads (--heads)"),
    (("spec", "dtype"), "dtype (--dtype)"),
    (("spec", "precision"), "compute precision (--precision)"),
    (("input", "format"), "input format"),
    (("input", "sha256"), "input (content fingerprint)"),
    (("input", "reader"), "input reader (jaxattn 0.2 reads 'A ||| B' pairs, strips white space)"),
    (("shards", "size"), "shard size (--shard-size)"),
    (("too_long",), "too-long policy (--too-long)"),
    (("chunk_bytes",), "chunk size"),
    (("codec",), "codec"),
)


class StoreMismatch(ValueError):
    """An existing store was written by a different command."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class InputInfo:
    """What identifies a dump's input.

    Attributes:
      name: the file's name (informational; moving a file is allowed).
      format: text, jsonl or conllu.
      sha256: hex digest of the file's bytes.
      size: the file's size in bytes.
      records: examples (lines or sentences) in the file, unreadable ones included.
      reader: how records were read into texts (`jaxattn.inputs.READER`): a
        resumed dump must read its input the same way.
    """

    name: str
    format: str
    sha256: str
    size: int
    records: int
    reader: str


def jaxattn_version() -> str:
    """The installed jaxattn version (\"unknown\" from a bare source tree)."""
    from importlib import metadata

    try:
        return metadata.version("jaxattn")
    except metadata.PackageNotFoundError:
        return "unknown"


def build(
    *,
    model_info: dict,
    model_fingerprint: str,
    spec,
    input_info: InputInfo,
    shard_size: int,
    too_long: str,
    chunk_bytes: int = layout.DEFAULT_CHUNK_BYTES,
) -> dict:
    """The metadata document of a store.

    Args:
      model_info: `ModelInfo` fields (name, family, layers, heads, hidden, head_dim...).
      model_fingerprint: `jaxattn.dump.fingerprint.checkpoint_fingerprint` of the model.
      spec: the `CaptureSpec`.
      input_info: the input's identity.
      shard_size: input records per shard.
      too_long: truncate, skip or error.
      chunk_bytes: uncompressed bytes per array chunk.
    """
    sizes = layout.axis_sizes(
        layers=len(spec.layers),
        heads=len(spec.heads),
        head_dim=model_info["head_dim"],
        hidden=model_info["hidden"],
    )
    shards = -(-input_info.records // shard_size)
    return {
        "format": layout.FORMAT,
        "format_version": layout.FORMAT_VERSION,
        "jaxattn_version": jaxattn_version(),
        "model": {**model_info, "fingerprint": model_fingerprint},
        "spec": {
            "what": list(spec.what),
            "layers": list(spec.layers),
            "heads": list(spec.heads),
            "dtype": spec.dtype,
            "precision": spec.precision,
        },
        "axes": {q: QUANTITIES[q].axes for q in spec.what},
        "sizes": sizes,
        "input": dataclasses.asdict(input_info),
        "shards": {"size": shard_size, "count": shards},
        "too_long": too_long,
        "chunk_bytes": chunk_bytes,
        "codec": layout.COMPRESSORS[spec.dtype],
    }


def _get(doc: dict, path: Sequence[str]):
    for key in path:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc


# Identity fields stores of earlier versions lack, and the value they meant.
_IMPLIED = {("spec", "precision"): "highest"}


def differences(existing: dict, new: dict) -> list[str]:
    """The identity fields that differ, as "name: store has X, this command Y" lines."""
    out = []
    for path, name in _IDENTITY:
        old, now = _get(existing, path), _get(new, path)
        if old is None:
            old = _IMPLIED.get(path)
        if old != now:
            out.append(f"{name}: the store has {old!r}, this command gives {now!r}")
    return out


def read(kv: KeyValue) -> dict | None:
    """The metadata of the store at `kv`, or None when there is no store there.

    Raises:
      ValueError: something that is not a jaxattn store is there.
    """
    root = kv.read_json("zarr.json")
    if root is None:
        return None
    meta = (root.get("attributes") or {}).get("jaxattn")
    if not isinstance(meta, dict) or meta.get("format") != layout.FORMAT:
        raise ValueError(
            f"{kv.spec['path'].rstrip('/')} holds a zarr node that is not a jaxattn store"
        )
    return meta


def create_or_check(kv: KeyValue, meta: dict) -> bool:
    """Create the store's group nodes, or check an existing store against `meta`.

    Safe when several processes call it at once: each writes the same bytes,
    atomically, so no barrier is needed.

    Returns:
      True if the store already existed (a resumed job).

    Raises:
      StoreMismatch: the existing store was written by a different command.
    """
    existing = read(kv)
    if existing is not None:
        diff = differences(existing, meta)
        if diff:
            where = kv.spec["path"].rstrip("/")
            raise StoreMismatch(
                f"the store at {where} was written by a different command:\n  "
                + "\n  ".join(diff)
                + "\nrerun the original command to finish it, or choose another --out"
            )
        return True
    for group in (*meta["spec"]["what"], layout.MANIFEST_DIR):
        kv.write_json(f"{group}/zarr.json", layout.group_metadata())
    kv.write_json("zarr.json", layout.group_metadata({"jaxattn": meta}))
    return False
