"""The store's root as a TensorStore key-value store: local paths and kvstore URLs.

Every byte of a store (zarr metadata, chunks, manifest parts) goes through
TensorStore, so a store may live wherever a TensorStore kvstore driver reaches
(``file://``, ``gs://``, ``s3://``...). Only local paths are tested here.
TensorStore's file driver writes each key to a temporary file and renames it,
so a reader sees a key whole or not at all: the commit of a shard relies on it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from typing import Any

from jaxattn.errors import CaptureFileError, JaxattnError

# TensorStore appends its spec or source locations in brackets: noise in a message.
_DETAILS = re.compile(r"\s*\[[a-z_ ]+=.*$", re.S)
_MAX_DETAIL = 240

# A store on the network (gs://, s3://, http://) retries a request that fails, doubling
# the wait from `initial_delay` to `max_delay`. TensorStore's own budget (32 tries up to
# 32 s apart: about a quarter of an hour) makes a store with no network look hung;
# jaxattn's (6 tries, 1 s to 16 s apart: about a minute) rides out a blip of some
# seconds and fails on a lost network with TensorStore's reason ("All 6 retry attempts
# failed: ... Could not resolve host ...").
REMOTE_RETRIES = {"max_retries": 6, "initial_delay": "1s", "max_delay": "16s"}
_RETRY_RESOURCES = ("gcs_request_retries", "s3_request_retries", "http_request_retries")


def _tensorstore():
    try:
        import tensorstore as ts
    except ImportError as e:  # a core dependency, but a client-only install may lack it
        raise ImportError("jaxattn stores need tensorstore: pip install tensorstore") from e
    return ts


def store_context(**resources: Any):
    """A TensorStore context for a store's reads and writes: the network kvstores'
    retries bounded (`REMOTE_RETRIES`), plus `resources` (e.g. a ``cache_pool``)."""
    retries = dict.fromkeys(_RETRY_RESOURCES, REMOTE_RETRIES)
    return _tensorstore().Context({**retries, **resources})


def tensorstore_detail(error: BaseException) -> str:
    """TensorStore's message of `error` in one line of at most 240 characters.

    Its messages carry the status code first (``NOT_FOUND: ...``), then the
    problem, then bracketed JSON specs and source locations: those are dropped.
    """
    lines = str(error).strip().splitlines()
    text = _DETAILS.sub("", lines[0] if lines else "").strip() or type(error).__name__
    return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 3] + "..."


@contextlib.contextmanager
def tensorstore_errors(location: str, operation: str, advice: str = ""):
    """Turn what TensorStore raises inside the block into a `CaptureFileError`.

    TensorStore reports every failure (a missing key, a file where a directory
    should be, a permission, a damaged chunk) as a ValueError or OSError with
    its own multi-line text; the user gets one line naming the store, the
    operation, TensorStore's reason and, when given, what to do.

    Raises:
      CaptureFileError: "cannot <operation> in the store at <location>: <reason>".
    """
    try:
        yield
    except JaxattnError:
        raise
    except (ValueError, OSError) as e:
        tail = f"; {advice}" if advice else ""
        raise CaptureFileError(
            f"cannot {operation} in the store at {location}: {tensorstore_detail(e)}{tail}"
        ) from e


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


def location_of(root: dict) -> str:
    """How messages name a store root: its directory, or its kvstore URL (the bucket
    with the path: ``gs://bucket/ewt.zarr``)."""
    path = local_path(root)
    if path is not None:
        return path.rstrip("/")
    return _tensorstore().KvStore.Spec(root).url.rstrip("/")


class KeyValue:
    """A thin synchronous view of the root kvstore, for small JSON documents."""

    def __init__(self, root: dict):
        self.spec = root
        self.location = location_of(root)
        with tensorstore_errors(self.location, "open the key-value store"):
            self._kv = _tensorstore().KvStore.open(root, context=store_context()).result()

    def read_bytes(self, key: str) -> bytes | None:
        """The value of `key`, or None if it is missing."""
        with tensorstore_errors(self.location, f"read {key}"):
            result = self._kv.read(key).result()
        return result.value if result.state == "value" else None

    def read_json(self, key: str) -> Any | None:
        """The JSON document at `key`, or None if it is missing.

        Raises:
          CaptureFileError: the value is not valid JSON (naming the key), or
            TensorStore cannot read it.
        """
        raw = self.read_bytes(key)
        if raw is None:
            return None
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as e:  # RecursionError: nested too deeply
            raise CaptureFileError(
                f"{self.spec['path']}{key} is not valid JSON ({e}): the store is damaged"
            ) from None

    def write_json(self, key: str, value: Any, advice: str = "") -> None:
        """Write `value` as JSON at `key`, atomically (whole or not at all); a failure
        (`tensorstore_errors`) ends with `advice` when given."""
        data = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
        with tensorstore_errors(self.location, f"write {key}", advice):
            self._kv.write(key, data).result()

    def list(self, prefix: str) -> list[str]:
        """Keys starting with `prefix`, sorted."""
        ts = _tensorstore()
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        with tensorstore_errors(self.location, f"list {prefix}"):
            keys = self._kv.list(ts.KvStore.KeyRange(prefix, end)).result()
        return sorted(k.decode() for k in keys)

    def delete_all(self) -> None:
        """Delete every key under the root (a store started over: `jaxattn.dump.job`)."""
        ts = _tensorstore()
        with tensorstore_errors(self.location, "delete the store's keys"):
            self._kv.delete_range(ts.KvStore.KeyRange()).result()
