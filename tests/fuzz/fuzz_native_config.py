"""jaxattn.json, the config of a `jaxattn convert` output (`jaxattn.checkpoints.native.load`):
the marker's format and version and the stored `ModelConfig`.

The folder has no params/, so a config that reads is answered "no params/
directory" (a CheckpointError too): every input ends in a CheckpointError, and
any other exception is a bug of the config reader.
"""

from __future__ import annotations

import json

from harness import workdir

from jaxattn.checkpoints import native
from jaxattn.config import tiny
from jaxattn.errors import CheckpointError

DESIGNED = (CheckpointError,)
TOKENS = (b'"config"', b'"format"', b'"version"', b'"num_heads"', b'"relative"', b'"rotary"')
TOKENS += (b"null", b"0", b"-1", b"[]", b"{}", b"[[[[[[")


def seeds() -> list[bytes]:
    config = tiny().to_dict()
    meta = {"format": "jaxattn", "version": native.FORMAT_VERSION, "config": config}
    return [json.dumps(meta).encode()]


def prepare() -> None:
    import orbax.checkpoint  # noqa: F401  (native.load imports it: once, off the clock)


def one_input(data: bytes) -> None:
    folder = workdir() / "native"
    folder.mkdir(exist_ok=True)
    (folder / native.MARKER).write_bytes(data)
    native.load(folder)
