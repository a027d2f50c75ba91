"""Every gRPC channel argument the product sets is one gRPC core knows.

gRPC ignores an argument it does not know without a word: the server's ping
policy was once set under a misspelt name, and gRPC's default applied instead
(tests/service/test_keepalive.py). The names gRPC core reads are strings in its
compiled module, so each of ours is looked up there.
"""

from __future__ import annotations

import re
from pathlib import Path

import grpc._cython.cygrpc as cygrpc

ROOT = Path(__file__).resolve().parents[2]
ARG = re.compile(rb'"(grpc\.[a-z0-9_.]+)"')


def product_arguments() -> set[str]:
    found = set()
    for folder in ("jaxattn", "service"):
        for path in (ROOT / folder).rglob("*.py"):
            found |= {m.decode() for m in ARG.findall(path.read_bytes())}
    return found


def test_every_channel_argument_is_known_to_grpc():
    core = Path(cygrpc.__file__).read_bytes()
    ours = product_arguments()
    assert "grpc.keepalive_time_ms" in ours  # the scan finds them
    unknown = sorted(a for a in ours if a.encode() + b"\0" not in core)
    assert not unknown, f"gRPC core does not know {unknown}"
