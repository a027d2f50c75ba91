"""The store's root as a TensorStore key-value store: local paths and kvstore URLs.

Every byte of a store (zarr metadata, chunks, manifest parts) goes through
TensorStore, so a store may live wherever a TensorStore kvstore driver reaches
(``file://``, ``gs://``, ``s3://``...). Only local paths are tested here.
TensorStore's file driver writes each key to a temporary file and renames it,
so a reader sees a key whole or not at all: the commit of a shard relies on it.
"""

from __future__ import annotations

import json
import os
from typing import Any


def _tensorstore():
    try:
        import tensorstore as ts
    except ImportError as e:  # a core dependency, but a client-only install may lack it
        raise ImportError("jaxattn stores need tensorstore: pip install tensorstore") from e
    return ts


def root_spec(location: str | os.PathLike) -> dict:
    """The kvstore spec (JSON) of a store root: a local path or a kvstore URL.

    The path always ends with "/" so keys and child paths join by concatenation.
    """
    ts = _tensorstore()
    text = os.fspath(location)
    if "://" in text:
        spec = ts.KvStore.Spec(text).to_json()
    else:
        spec = {"driver": "file", "path": os.path.abspath(text)}
    spec["path"] = spec.get("path", "").rstrip("/") + "/"
    return spec


def child_spec(root: dict, path: str) -> dict:
    """The kvstore spec of `path` (relative, e.g. "attention/s000003/") under `root`."""
    return {**root, "path": root["path"] + path}


def local_path(root: dict) -> str | None:
    """The directory of a file-driver store, or None for other drivers."""
    return root["path"] if root.get("driver") == "file" else None


class KeyValue:
    """A thin synchronous view of the root kvstore, for small JSON documents."""

    def __init__(self, root: dict):
        self.spec = root
        self._kv = _tensorstore().KvStore.open(root).result()

    def read_bytes(self, key: str) -> bytes | None:
        """The value of `key`, or None if it is missing."""
        result = self._kv.read(key).result()
        return result.value if result.state == "value" else None

    def read_json(self, key: str) -> Any | None:
        """The JSON document at `key`, or None if it is missing.

        Raises:
          ValueError: the value is not valid JSON (naming the key).
        """
        raw = self.read_bytes(key)
        if raw is None:
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise ValueError(f"{self.spec['path']}{key} is not valid JSON: {e}") from None

    def write_json(self, key: str, value: Any) -> None:
        """Write `value` as JSON at `key`, atomically (whole or not at all)."""
        data = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
        self._kv.write(key, data).result()

    def list(self, prefix: str) -> list[str]:
        """Keys starting with `prefix`, sorted."""
        ts = _tensorstore()
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        keys = self._kv.list(ts.KvStore.KeyRange(prefix, end)).result()
        return sorted(k.decode() for k in keys)
